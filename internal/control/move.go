package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/time/rate"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// A change of the map that gives users another cell moves their
// inquiries with them (docs/decisions/moving-users-data.md): before the
// map is committed, each data move of the plan (slotmap.Plan.DataMoves)
// is copied while the source works on, fenced, copied again and verified;
// after it, the destination makes the handed-over work its own and the
// source lets the users go. The steps are the cells' (internal/move,
// through their admin API); a Mover drives them.

// MoveConfig shapes the moves of data a change runs.
type MoveConfig struct {
	// Rate bounds the messages copied per second, per move [0: none]:
	// the copy shares the cells' stores with their traffic.
	Rate int
	// Page is how many messages one call of the copy carries [500].
	Page int
	// AttemptWait bounds the wait, after the fence, for the moving users'
	// attempts under way to end [10s]: one that ends within it writes its
	// result, one that ends after it cannot (its record was handed over)
	// and the destination calls the agency again. The moving users' new
	// inquiries are refused (user-moving) meanwhile: longer spares the
	// agencies a call, shorter spares the users the wait.
	AttemptWait time.Duration
	// Poll is how often the attempts under way are asked for [200 ms].
	Poll time.Duration
	// LeaveData changes the map even when a move's cell does not answer at
	// all: that move is skipped, its users' inquiries left where they are
	// (read there through the users' new cell while it answers). Without
	// it such a change is refused, nothing changed.
	LeaveData bool
	// LeaveHow is how the caller's user asks for LeaveData, named in a
	// refusal ["LeaveData"]: cellctl's --leave-data, or remove's --force.
	LeaveHow string
}

// DefaultMoveConfig returns the defaults in brackets above.
func DefaultMoveConfig() MoveConfig {
	return MoveConfig{Page: 500, AttemptWait: 10 * time.Second, Poll: 200 * time.Millisecond, LeaveHow: "LeaveData"}
}

// withDefaults fills the zero fields of c from DefaultMoveConfig, field
// by field.
func (c MoveConfig) withDefaults() MoveConfig {
	d := DefaultMoveConfig()
	c.Page = cmp.Or(c.Page, d.Page)
	c.AttemptWait = cmp.Or(c.AttemptWait, d.AttemptWait)
	c.Poll = cmp.Or(c.Poll, d.Poll)
	c.LeaveHow = cmp.Or(c.LeaveHow, d.LeaveHow)
	return c
}

// MoveAdmin is what a move asks of cells (an adminclient.Client with a
// long enough timeout for a slot set's ledger).
type MoveAdmin interface {
	PutMove(ctx context.Context, base string, cm api.CellMove) (*api.CellMove, error)
	Move(ctx context.Context, base, id string) (*api.CellMove, error)
	DeleteMove(ctx context.Context, base, id string) error
	ExportMove(ctx context.Context, base, id string, after uint64, limit int, slots []int) (*api.MovePage, error)
	ImportMove(ctx context.Context, base, id string, page *api.MovePage) error
	DigestMove(ctx context.Context, base, id string, horizon time.Time) (*api.MoveDigest, error)
	MoveStep(ctx context.Context, base, id, action string, slots []int) (int, error)
	MoveSize(ctx context.Context, base string, spec api.MoveSpec) (*api.MoveSize, error)
}

var _ MoveAdmin = adminclient.Client{}

// Mover drives the cells' steps of data moves.
type Mover struct {
	admin MoveAdmin
	cfg   MoveConfig
	note  func(Note)
	now   func() time.Time
}

// NewMover drives moves through admin. note hears of each step (nil:
// nobody), now is the clock (nil: time.Now).
func NewMover(admin MoveAdmin, cfg MoveConfig, note func(Note), now func() time.Time) *Mover {
	cfg = cfg.withDefaults()
	if note == nil {
		note = func(Note) {}
	}
	if now == nil {
		now = time.Now
	}
	return &Mover{admin: admin, cfg: cfg, note: note, now: now}
}

// PlanSize is what a plan's data moves would carry: the messages and
// bytes of every move's source (Size), and how long copying them takes
// at the Mover's Rate (0: no rate, as fast as the cells take them).
type PlanSize struct {
	Moves    int           `json:"moves"`
	Messages int           `json:"messages"`
	Bytes    int           `json:"bytes"`
	Copy     time.Duration `json:"copy_ns,omitempty"`
}

// Size asks each source of p's data moves what its move would carry
// (nothing is recorded): the plan's estimate. A source that does not
// answer makes it an error naming the cell.
func (mv *Mover) Size(ctx context.Context, p *slotmap.Plan) (PlanSize, error) {
	var ps PlanSize
	for _, spec := range p.DataMoves() {
		from, ok := p.Before.Cell(spec.From)
		if !ok {
			continue
		}
		spec.ID = "size"
		sz, err := atCell(from, func(a string) (*api.MoveSize, error) { return mv.admin.MoveSize(ctx, a, spec) })
		if err != nil {
			return ps, &silentCell{cell: spec.From, err: err}
		}
		ps.Moves++
		ps.Messages += sz.Messages
		ps.Bytes += sz.Bytes
	}
	if mv.cfg.Rate > 0 {
		ps.Copy = time.Duration(ps.Messages) * time.Second / time.Duration(mv.cfg.Rate)
	}
	return ps, nil
}

// silentCell: a move's cell could not record its part (no process
// answered, or one refused): nothing was moved.
type silentCell struct {
	cell string
	err  error
}

func (e *silentCell) Error() string {
	if adminclient.Unreachable(e.err) {
		return fmt.Sprintf("cell %s does not answer (%v)", e.cell, e.err)
	}
	return fmt.Sprintf("cell %s cannot take part (%v)", e.cell, e.err)
}

// ErrVerify is a move whose two sides' digests differ after a slot was
// copied again: the move is called off, nothing changed.
var ErrVerify = errors.New("the copies differ")

// Prepare runs the steps of a change's moves before the map, in two
// rounds, so that each move's users are fenced for the short one alone:
// first each move's cells record their parts and the source's messages
// of the users are copied while the source works on; then every source
// is fenced, and for each move the attempts under way are waited for
// (together: no new one starts anywhere), its pending inquiries are
// handed over, what changed is copied, and both sides are digested per
// slot (a slot that differs is copied again whole, once). A move that
// fails is called off (Abort) and its error returned; the caller calls
// the others off. A move whose cell cannot take part is skipped with
// LeaveData, else it fails the change.
//
// reps are where the moves stand (each Spec a move's); save, called
// after each step, keeps them (the change's record).
func (mv *Mover) Prepare(ctx context.Context, m *slotmap.Map, reps []api.MoveProgress, save func() error) error {
	defer Hold(ctx)() // the change's time limit stops while the cells work
	runs := make([]moveRun, len(reps))
	for i := range reps {
		runs[i] = moveRun{rep: &reps[i], step: func(name string) error { reps[i].Step = name; return save() }}
		if err := mv.settle(ctx, m, runs[i], mv.copyFirst(ctx, m, &runs[i])); err != nil {
			return err
		}
	}
	for _, r := range runs {
		if r.rep.Step == "skipped" {
			continue
		}
		if err := mv.settle(ctx, m, r, mv.fence(ctx, r)); err != nil {
			return err
		}
	}
	for _, r := range runs {
		if r.rep.Step == "skipped" {
			continue
		}
		if err := mv.settle(ctx, m, r, mv.seal(ctx, r)); err != nil {
			return err
		}
	}
	return nil
}

// moveRun is one move of Prepare's: where it stands, its cells, its rate
// and its first copy's cursor.
type moveRun struct {
	rep      *api.MoveProgress
	step     func(name string) error
	from, to slotmap.Cell
	src, dst *api.CellMove
	limiter  *rate.Limiter
	cursor   uint64
}

// settle ends a step of r that failed with err: a cell that cannot take
// part skips the move (LeaveData) or refuses the change; any other
// failure calls the move off.
func (mv *Mover) settle(ctx context.Context, m *slotmap.Map, r moveRun, err error) error {
	rep := r.rep
	var silent *silentCell
	switch {
	case err == nil:
		return nil
	case errors.As(err, &silent):
		// Nothing was moved: at most the source recorded the move.
		if silent.cell != rep.Spec.From {
			if from, ok := m.Cell(rep.Spec.From); ok {
				_, _ = atCell(from, func(a string) (struct{}, error) { return struct{}{}, mv.admin.DeleteMove(ctx, a, rep.Spec.ID) })
			}
		}
		rep.Error = err.Error()
		if !mv.cfg.LeaveData {
			rep.Step = "called-off"
			return fmt.Errorf("move %s: %w: its users' inquiries cannot move with them; nothing changed (%s changes the map all the same and leaves them in %s)", rep.Spec.ID, err, mv.cfg.LeaveHow, rep.Spec.From)
		}
		mv.note(Note{Warning: true, Text: fmt.Sprintf("Move %s skipped: %v; the inquiries of its users stay in %s.", rep.Spec.ID, err, rep.Spec.From)})
		return r.step("skipped")
	}
	spec := rep.Spec
	rep.Error = err.Error()
	if aerr := mv.Abort(context.WithoutCancel(ctx), m, rep); aerr != nil {
		return fmt.Errorf("%w; calling move %s off failed too: %v", err, spec.ID, aerr)
	}
	return fmt.Errorf("move %s (%s → %s) called off, nothing changed: %w", spec.ID, spec.From, spec.To, err)
}

// copyFirst has r's cells record their parts and copies the source's
// messages of the users as they are.
func (mv *Mover) copyFirst(ctx context.Context, m *slotmap.Map, r *moveRun) error {
	spec := r.rep.Spec
	var err error
	if r.from, r.to, err = moveCells(m, r.rep); err != nil {
		return err
	}
	if err := r.step("recording"); err != nil {
		return err
	}
	// A cell that cannot record its part (down, starting, a release
	// without moves) takes none: nothing is moved.
	if r.src, err = mv.record(ctx, r.from, api.CellMove{Spec: spec, Role: api.MoveSource}); err != nil {
		return &silentCell{cell: spec.From, err: err}
	}
	if r.dst, err = mv.record(ctx, r.to, api.CellMove{Spec: spec, Role: api.MoveDestination}); err != nil {
		return &silentCell{cell: spec.To, err: err}
	}
	if err := r.step("copying"); err != nil {
		return err
	}
	mv.note(Note{Text: fmt.Sprintf("Move %s: copying the inquiries of %d slots and %d users from %s to %s ...", spec.ID, len(spec.Slots), len(spec.Users), spec.From, spec.To)})
	r.limiter = rate.NewLimiter(rate.Inf, 0)
	if mv.cfg.Rate > 0 {
		r.limiter = rate.NewLimiter(rate.Limit(mv.cfg.Rate), max(mv.cfg.Rate, mv.cfg.Page))
	}
	r.cursor, err = mv.copyFrom(ctx, r.limiter, r.from, r.to, spec.ID, 0, nil, &r.rep.Copied, &r.rep.Bytes)
	return err
}

// fence has r's source refuse its users' new inquiries and start no
// attempt of theirs.
func (mv *Mover) fence(ctx context.Context, r moveRun) error {
	fenced := mv.now().UTC()
	r.rep.Fenced = &fenced
	if err := r.step("fenced"); err != nil {
		return err
	}
	spec := r.rep.Spec
	if _, err := atCell(r.from, func(a string) (*api.CellMove, error) {
		return mv.admin.PutMove(ctx, a, api.CellMove{Spec: spec, Role: api.MoveSource, Fenced: true})
	}); err != nil {
		return fmt.Errorf("fence the users at %s: %w", spec.From, err)
	}
	return nil
}

// seal finishes r's copy under the fence: it waits for the attempts
// under way, has the source hand its pending inquiries over, copies what
// changed, and verifies both sides (a slot that differs copied again
// whole, once).
func (mv *Mover) seal(ctx context.Context, r moveRun) error {
	rep, spec := r.rep, r.rep.Spec
	mv.waitAttempts(ctx, r.from, spec.ID)
	var err error
	if rep.Handed, err = atCell(r.from, func(a string) (int, error) { return mv.admin.MoveStep(ctx, a, spec.ID, api.MoveHand, nil) }); err != nil {
		return fmt.Errorf("hand the pending inquiries over at %s: %w", spec.From, err)
	}
	if err := r.step("handed"); err != nil {
		return err
	}
	if _, err := mv.copyFrom(ctx, r.limiter, r.from, r.to, spec.ID, r.cursor, nil, &rep.Copied, &rep.Bytes); err != nil {
		return err
	}
	ttl := time.Duration(min(cmp.Or(r.src.RecordTTLSeconds, 1<<40), cmp.Or(r.dst.RecordTTLSeconds, 1<<40))) * time.Second
	horizon := mv.now().Add(-ttl + time.Minute)
	if err := r.step("copied"); err != nil {
		return err
	}
	differ, err := mv.verify(ctx, r.from, r.to, spec.ID, horizon, rep)
	if err != nil {
		return err
	}
	if len(differ) == 0 {
		rep.Verified = true
		return r.step("verified")
	}
	mv.note(Note{Warning: true, Text: fmt.Sprintf("Move %s: %d slots differ after the copy (%v): copying them again whole.", spec.ID, len(differ), firstSlots(differ))})
	if _, err := atCell(r.to, func(a string) (int, error) { return mv.admin.MoveStep(ctx, a, spec.ID, api.MoveDiscard, differ) }); err != nil {
		return fmt.Errorf("clear the slots to copy again at %s: %w", spec.To, err)
	}
	if _, err := mv.copyFrom(ctx, r.limiter, r.from, r.to, spec.ID, 0, differ, &rep.Again, &rep.Bytes); err != nil {
		return err
	}
	if differ, err = mv.verify(ctx, r.from, r.to, spec.ID, horizon, rep); err != nil {
		return err
	}
	if len(differ) > 0 {
		return fmt.Errorf("%w in %d slots after copying them again (%v)", ErrVerify, len(differ), firstSlots(differ))
	}
	rep.Verified = true
	return r.step("verified")
}

// record has cell record its part cm, and checks that what it answered
// is that part (a server that answers anything is no cell taking part).
func (mv *Mover) record(ctx context.Context, cell slotmap.Cell, cm api.CellMove) (*api.CellMove, error) {
	got, err := atCell(cell, func(a string) (*api.CellMove, error) { return mv.admin.PutMove(ctx, a, cm) })
	if err == nil && (got == nil || got.Spec.ID != cm.Spec.ID || got.Role != cm.Role) {
		err = fmt.Errorf("its admin API answered no record of move %s", cm.Spec.ID)
	}
	return got, err
}

// copyFrom copies the source's messages after cursor (in slots: nil, all
// the move's) page by page and returns the cursor after the last.
func (mv *Mover) copyFrom(ctx context.Context, limiter *rate.Limiter, from, to slotmap.Cell, id string, cursor uint64, slots []int, copied, bytes *int) (uint64, error) {
	for {
		page, err := atCell(from, func(a string) (*api.MovePage, error) {
			return mv.admin.ExportMove(ctx, a, id, cursor, mv.cfg.Page, slots)
		})
		if err != nil {
			return cursor, fmt.Errorf("read the inquiries to move at %s: %w", from.ID, err)
		}
		if n := len(page.Messages); n > 0 {
			if err := limiter.WaitN(ctx, min(n, limiter.Burst())); err != nil && limiter.Limit() != rate.Inf {
				return cursor, err
			}
			if _, err := atCell(to, func(a string) (struct{}, error) { return struct{}{}, mv.admin.ImportMove(ctx, a, id, page) }); err != nil {
				return cursor, fmt.Errorf("write the moved inquiries at %s: %w", to.ID, err)
			}
			*copied += n
			for _, msg := range page.Messages {
				*bytes += len(msg.Record)
			}
		}
		if page.Done {
			return max(cursor, page.Next), nil
		}
		if page.Next <= cursor {
			return cursor, fmt.Errorf("read the inquiries to move at %s: its page ended at %d, not after %d: the copy would not advance", from.ID, page.Next, cursor)
		}
		cursor = page.Next
	}
}

// waitAttempts waits until no process of cell from has an attempt of the
// move's users under way, or AttemptWait passes; a process that does not
// answer has none (it is down: its attempts ended with it, and one that
// comes back cannot write over the hand-over).
func (mv *Mover) waitAttempts(ctx context.Context, from slotmap.Cell, id string) {
	deadline := mv.now().Add(mv.cfg.AttemptWait)
	for {
		busy := 0
		for _, a := range from.Admins() {
			if cm, err := mv.admin.Move(ctx, a, id); err == nil {
				busy += cm.Inflight
			}
		}
		if busy == 0 || !mv.now().Before(deadline) || ctx.Err() != nil {
			if busy > 0 {
				mv.note(Note{Warning: true, Text: fmt.Sprintf("Move %s: %d attempts of the moving users still under way at %s after %s: handing over (they cannot write after it).", id, busy, from.ID, mv.cfg.AttemptWait)})
			}
			return
		}
		t := time.NewTimer(mv.cfg.Poll)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// verify compares both sides' digests and returns the slots that differ.
func (mv *Mover) verify(ctx context.Context, from, to slotmap.Cell, id string, horizon time.Time, rep *api.MoveProgress) ([]int, error) {
	a, err := atCell(from, func(a string) (*api.MoveDigest, error) { return mv.admin.DigestMove(ctx, a, id, horizon) })
	if err != nil {
		return nil, fmt.Errorf("digest the moving inquiries at %s: %w", from.ID, err)
	}
	b, err := atCell(to, func(a string) (*api.MoveDigest, error) { return mv.admin.DigestMove(ctx, a, id, horizon) })
	if err != nil {
		return nil, fmt.Errorf("digest the moved inquiries at %s: %w", to.ID, err)
	}
	var differ []int
	rep.Slots, rep.Messages = 0, 0
	for slot, d := range a.Slots {
		rep.Slots++
		rep.Messages += d.Messages
		if b.Slots[slot] != d {
			differ = append(differ, slot)
		}
	}
	for slot := range b.Slots {
		if _, ok := a.Slots[slot]; !ok {
			differ = append(differ, slot)
		}
	}
	slices.Sort(differ)
	return differ, nil
}

func firstSlots(slots []int) string {
	if len(slots) > 8 {
		return fmt.Sprint(slots[:8]) + " …"
	}
	return fmt.Sprint(slots)
}

// Finish runs a move's steps once the map m gives the users to the
// destination: it makes the handed-over inquiries its work, the source
// lets the users' messages go, and both forget the move. Each step can be
// run again.
func (mv *Mover) Finish(ctx context.Context, m *slotmap.Map, rep *api.MoveProgress) error {
	defer Hold(ctx)() // the change's time limit stops while the cells work
	spec := rep.Spec
	from, to, err := moveCells(m, rep)
	if err != nil {
		return err
	}
	n, err := atCell(to, func(a string) (int, error) { return mv.admin.MoveStep(ctx, a, spec.ID, api.MoveActivate, nil) })
	if err != nil && !unknownMove(err) {
		return fmt.Errorf("make the handed inquiries work at %s: %w", spec.To, err)
	}
	if rep.Finished == nil {
		finished := mv.now().UTC()
		rep.Activated, rep.Finished = n, &finished
	}
	if _, err := atCell(from, func(a string) (int, error) { return mv.admin.MoveStep(ctx, a, spec.ID, api.MoveDiscard, nil) }); err != nil && !unknownMove(err) {
		return fmt.Errorf("let the moved users go at %s: %w", spec.From, err)
	}
	if err := mv.forget(ctx, from, to, spec.ID); err != nil {
		return err
	}
	rep.Step = "done"
	return nil
}

// Abort calls a move off before the map changed: the source takes its
// handed-over inquiries back as work and lifts the fence, the
// destination lets the copies go, and both forget the move. Each step can
// be run again.
func (mv *Mover) Abort(ctx context.Context, m *slotmap.Map, rep *api.MoveProgress) error {
	defer Hold(ctx)() // the change's time limit stops while the cells work
	spec := rep.Spec
	from, to, err := moveCells(m, rep)
	if err != nil {
		return err
	}
	if _, err := atCell(from, func(a string) (int, error) { return mv.admin.MoveStep(ctx, a, spec.ID, api.MoveActivate, nil) }); err != nil && !unknownMove(err) {
		return fmt.Errorf("take the handed inquiries back at %s: %w", spec.From, err)
	}
	if _, err := atCell(to, func(a string) (int, error) { return mv.admin.MoveStep(ctx, a, spec.ID, api.MoveDiscard, nil) }); err != nil && !unknownMove(err) {
		return fmt.Errorf("let the copies go at %s: %w", spec.To, err)
	}
	if err := mv.forget(ctx, from, to, spec.ID); err != nil {
		return err
	}
	rep.Step = "called-off"
	return nil
}

func (mv *Mover) forget(ctx context.Context, from, to slotmap.Cell, id string) error {
	var errs []error
	for _, c := range []slotmap.Cell{from, to} {
		if _, err := atCell(c, func(a string) (struct{}, error) { return struct{}{}, mv.admin.DeleteMove(ctx, a, id) }); err != nil && !unknownMove(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// atCell calls f with the admin APIs of cell in turn, its own first,
// until one answers: a process that is down does not stop a step (every
// process of a cell reads the same store).
func atCell[T any](cell slotmap.Cell, f func(admin string) (T, error)) (T, error) {
	admins := append([]string{cell.Admin}, cell.Admins()...)
	var zero T
	var err error
	for i, a := range admins {
		if a == "" || slices.Contains(admins[:i], a) {
			continue
		}
		var v T
		if v, err = f(a); err == nil || !adminclient.Unreachable(err) {
			return v, err
		}
	}
	return zero, err
}

// unknownMove: the cell has forgotten the move already (a step run
// again), or never had it (a release without moves answers the path 404).
func unknownMove(err error) bool {
	var ae *adminclient.Error
	return errors.As(err, &ae) && ae.Status == 404
}

// moveCells are the source and destination of rep's move: as m has them,
// else as its record has them (a cell that a change called off was
// adding is in no committed map).
func moveCells(m *slotmap.Map, rep *api.MoveProgress) (from, to slotmap.Cell, err error) {
	get := func(id string) (slotmap.Cell, error) {
		if c, ok := m.Cell(id); ok {
			return c, nil
		}
		if a := rep.Admins[id]; len(a) > 0 {
			c := slotmap.Cell{ID: id, Admin: a[0]}
			for _, x := range a[1:] {
				c.Instances = append(c.Instances, slotmap.Instance{Admin: x})
			}
			return c, nil
		}
		return slotmap.Cell{}, fmt.Errorf("move %s: cell %s is not in the map", rep.Spec.ID, id)
	}
	if from, err = get(rep.Spec.From); err == nil {
		to, err = get(rep.Spec.To)
	}
	return from, to, err
}

// MoveAdmins are the admin URLs of cell (its own, then its instances'), as
// a move's record keeps them.
func MoveAdmins(c slotmap.Cell) []string {
	out := []string{c.Admin}
	for _, in := range c.Instances {
		out = append(out, in.Admin)
	}
	return out
}
