package cellctl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/cellkit/cellkit/internal/control"
)

// moveTimeout bounds one step of a data move at a cell (it reads a slot
// set's whole ledger).
const moveTimeout = 2 * time.Minute

// mover drives the cells' steps of data moves for this command (its
// --timeout, the context's Deadline, held while they run).
func (x *inv) mover() *control.Mover {
	admin := x.admin()
	admin.Timeout = moveTimeout
	cfg := control.MoveConfig{LeaveData: x.cmd.leaveData, LeaveHow: "--" + cmp.Or(x.cmd.leave, "leave-data"), Rate: x.cmd.moveRate}
	return control.NewMover(admin, cfg, x.note, x.cli.now)
}

func moveStatusCommand() *command {
	c := &command{
		name: "move status", section: secInspect,
		summary: "the data moves of a map change under way",
		help: `Shows the data moves a map change left under way (the record beside the map):
the map version they are for, their phase (preparing: the map unchanged;
committed: finishing), and per move its cells, slots and users, the step it
reached, the messages copied and handed over, and the verification. With no
move under way it says so. --json: the record.`,
		examples: `cellctl move status
cellctl move status --json`,
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		reg, err := x.openRegistry()
		if err != nil {
			return err
		}
		defer reg.Close()
		rec, err := x.controller(reg, nil).Moves(ctx)
		if errors.Is(err, control.ErrNoMoves) {
			if x.g.json {
				return writeJSON(x.out, map[string]any{"moves": []any{}})
			}
			fmt.Fprintf(x.out, "No data move under way in %s.\n", reg.Describe())
			return nil
		}
		if err != nil {
			return err
		}
		if x.g.json {
			return writeJSON(x.out, rec)
		}
		fmt.Fprintf(x.out, "Data moves of map version %d (%s): %s, by %s, started %s, updated %s\n\n", rec.Version, rec.Change, rec.Phase, rec.Holder,
			rec.Started.UTC().Format(time.RFC3339), rec.Updated.UTC().Format(time.RFC3339))
		tw := tabwriter.NewWriter(x.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "MOVE\tFROM\tTO\tSLOTS\tUSERS\tSTEP\tCOPIED\tBYTES\tHANDED\tVERIFIED")
		for _, m := range rec.Moves {
			verified := "no"
			if m.Verified {
				verified = fmt.Sprintf("yes (%d slots, %d messages)", m.Slots, m.Messages)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%s\n", m.Spec.ID, m.Spec.From, m.Spec.To, len(m.Spec.Slots), len(m.Spec.Users),
				m.Step, m.Copied+m.Again, m.Bytes, m.Handed, verified)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, m := range rec.Moves {
			if m.Error != "" {
				fmt.Fprintf(x.out, "\n%s: %s\n", m.Spec.ID, m.Error)
			}
		}
		fmt.Fprintln(x.out, "\n'cellctl move resume' finishes them (forward if the map is committed, else called off).")
		return nil
	}
	return c
}

func moveResumeCommand() *command {
	c := &command{
		name: "move resume", section: secMap,
		summary: "finish the data moves a map change left under way",
		help: `Finishes the data moves a map change left under way (its cellctl killed, a
cell or the registry gone for a while): when the map holds the version they
were for, the new cells make the handed-over inquiries their work and the
old ones let the users go; when it does not, the moves are called off (the
old cells take their handed-over inquiries back, the copies are let go).
Under the registry's writer lock. Nothing under way: nothing to do.`,
		examples: `cellctl move resume`,
		moves:    true, leave: "-",
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		reg, err := x.openRegistry()
		if err != nil {
			return err
		}
		defer reg.Close()
		ctl := x.controller(reg, nil)
		if _, err := ctl.Moves(ctx); errors.Is(err, control.ErrNoMoves) {
			fmt.Fprintf(x.out, "No data move under way in %s.\n", reg.Describe())
			return nil
		} else if err != nil {
			return err
		}
		_, release, err := ctl.Lock(ctx)
		if err != nil {
			return err
		}
		defer release()
		if err := ctl.ResumeMoves(ctx); err != nil {
			return err
		}
		fmt.Fprintln(x.out, "The data moves are finished.")
		return nil
	}
	return c
}
