package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// Origin marks the writer lock and the change text of every map version the
// provider commits.
const Origin = "terraform"

// client is what the resources share: the registry, and internal/control
// for every change. The provider has no map-changing code of its own: a
// cell created, reweighted, drained or removed here goes through the same
// operations, writer lock, compare-and-swap, re-plan, history and
// queue-aware drain as from cellctl's command line.
type client struct {
	registry string
	lockWait time.Duration
	admin    adminclient.Client
	moves    control.MoveConfig // the data moves' settings (leave_data, move_rate)
}

func newClient(reg string, lockWait time.Duration, adminToken string, moves control.MoveConfig) *client {
	moves.LeaveHow = "the provider's leave_data = true"
	return &client{registry: reg, lockWait: lockWait, admin: adminclient.Client{HTTP: http.DefaultClient, Token: adminToken}, moves: moves}
}

// leavingData is c with leave_data set: a change whose cell does not
// answer leaves that cell's users' inquiries where they are.
func (c *client) leavingData() *client {
	l := *c
	l.moves.LeaveData = true
	return &l
}

// moveStepTimeout bounds one step of a data move at a cell (it reads a
// slot set's whole ledger), as cellctl's.
const moveStepTimeout = 2 * time.Minute

// configured is the client a resource or data source gets from the
// provider's Configure (ProviderData is nil while Terraform validates a
// configuration before the provider is configured: keep what it had).
func configured(providerData any, had *client) *client {
	if c, ok := providerData.(*client); ok {
		return c
	}
	return had
}

// controller runs fn with a Controller on the provider's registry, named
// for op in the writer lock, within cellctl's default time for a command
// (within, if set, instead), not counting the time the cells spend on
// the change's data moves (which move the users' inquiries with them).
func (c *client) controller(ctx context.Context, op string, within time.Duration, fn func(ctx context.Context, ctl *control.Controller) error) error {
	reg, err := registry.Open(registry.Config{URL: c.registry}, registry.Options{})
	if err != nil {
		return err
	}
	defer reg.Close()
	if within <= 0 {
		within = control.DefaultTimeout
	}
	dl, stop := control.WithDeadline(ctx, within)
	defer stop()
	admin := c.admin
	admin.Timeout = moveStepTimeout
	ctl := control.New(reg, control.Config{Holder: control.Holder(Origin + " " + op), Origin: Origin, LockWait: c.lockWait},
		control.Options{Moves: control.NewMover(admin, c.moves, nil, nil)})
	return fn(dl, ctl)
}

// change commits one map change (op names it in the lock).
func (c *client) change(ctx context.Context, op string, plan control.Planner) error {
	return c.controller(ctx, op, 0, func(ctx context.Context, ctl *control.Controller) error {
		_, err := ctl.Apply(ctx, control.Change{Plan: plan})
		return err
	})
}

// check plans a change without committing it: the planner's refusal, if
// any, with the registry untouched.
func (c *client) check(ctx context.Context, plan control.Planner) error {
	return c.controller(ctx, "check", 0, func(ctx context.Context, ctl *control.Controller) error {
		_, err := ctl.Apply(ctx, control.Change{Plan: plan, DryRun: true})
		return err
	})
}

// init writes a new map of slots slots and the agencies' limits.
func (c *client) init(ctx context.Context, slots int, limits map[string]int) error {
	fresh, err := slotmap.New(slots, limits)
	if err != nil {
		return errors.New("refused: " + control.InvalidReason(err))
	}
	return c.controller(ctx, "init", 0, func(ctx context.Context, ctl *control.Controller) error {
		_, err := ctl.Init(ctx, control.InitChange{Map: fresh})
		return err
	})
}

// drain drains a cell within the timeout (see control.Controller.Drain).
func (c *client) drain(ctx context.Context, req control.DrainRequest, within time.Duration) error {
	return c.controller(ctx, "drain", within, func(ctx context.Context, ctl *control.Controller) error {
		_, err := ctl.Drain(ctx, c.admin, req)
		return err
	})
}

// undrain makes a cell active again and reopens its intake, as cellctl
// undrain does; warning says why the intake could not be reopened (the
// cell is active in the map either way: a later undrain, or the cell,
// reopens it).
func (c *client) undrain(ctx context.Context, id string) (warning string, err error) {
	err = c.controller(ctx, "undrain", 0, func(ctx context.Context, ctl *control.Controller) error {
		res, err := ctl.Apply(ctx, control.Change{Plan: control.Undrain(id)})
		if err != nil || !res.Applied {
			return err
		}
		cell, _ := res.Plan.After.Cell(id)
		if err := c.admin.SetIntakes(ctx, cell, true); err != nil {
			warning = fmt.Sprintf("cell %s is active again, but its intake could not be reopened: %v", id, err)
		}
		return nil
	})
	return warning, err
}

// load reads the current map; registry.ErrNoMap when there is none.
func (c *client) load(ctx context.Context) (*slotmap.Map, error) {
	reg, err := registry.Open(registry.Config{URL: c.registry}, registry.Options{})
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(ctx, control.DefaultTimeout)
	defer cancel()
	m, err := reg.Load(ctx)
	if err != nil && !errors.Is(err, registry.ErrNoMap) {
		return nil, fmt.Errorf("read the map from registry %s: %w", reg.Describe(), err)
	}
	return m, err
}
