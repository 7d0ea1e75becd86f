package control

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// The data moves of a change are recorded beside the map before each step
// (api.MovesRecord), under the writer lock: a change cut anywhere (its
// cellctl killed, the registry gone for a while, a cell down) is finished
// by the next change or `cellctl move resume` — rolled forward when its map
// was committed, called off when it was not.

// ErrNoMoves: no data move is under way.
var ErrNoMoves = errors.New("no data move under way")

// movesDoc is the record's document, with the revision last read.
type movesDoc struct {
	doc registry.Document
	rev uint64
	api.MovesRecord
}

// Moves reads the record of the data moves under way, or ErrNoMoves.
func (c *Controller) Moves(ctx context.Context) (*api.MovesRecord, error) {
	d, err := c.loadMoves(ctx)
	if err != nil {
		return nil, err
	}
	return &d.MovesRecord, nil
}

func (c *Controller) loadMoves(ctx context.Context) (*movesDoc, error) {
	doc := registry.DocumentFor(c.reg, api.MovesDocument)
	if doc == nil {
		return nil, ErrNoMoves // a registry that keeps none beside its map
	}
	data, rev, err := doc.Get(ctx)
	if errors.Is(err, registry.ErrNoDocument) {
		return nil, ErrNoMoves
	}
	if err != nil {
		return nil, fmt.Errorf("read the data moves' record %s: %w", doc.Describe(), err)
	}
	d := &movesDoc{doc: doc, rev: rev}
	if err := json.Unmarshal(data, &d.MovesRecord); err != nil {
		return nil, fmt.Errorf("the data moves' record %s: %w", doc.Describe(), err)
	}
	return d, nil
}

// save writes the record over the revision read (nothing without a
// document).
func (c *Controller) save(ctx context.Context, d *movesDoc) error {
	d.Updated = c.opts.Now().UTC()
	if d.doc == nil {
		return nil
	}
	data, err := json.Marshal(d.MovesRecord)
	if err != nil {
		return err
	}
	if err := d.doc.Put(ctx, data, d.rev); err != nil {
		return fmt.Errorf("record the data moves in %s: %w", d.doc.Describe(), err)
	}
	_, d.rev, err = d.doc.Get(ctx)
	return err
}

// prepareMoves runs the data moves the plan p needs before next is
// committed (nil when there are none, or no Mover): recorded first, then
// each prepared in turn; one that fails calls off those before it.
func (c *Controller) prepareMoves(ctx context.Context, cur *slotmap.Map, p *slotmap.Plan, next *slotmap.Map) (*movesDoc, error) {
	if c.opts.Moves == nil {
		return nil, nil
	}
	specs := p.DataMoves()
	if len(specs) == 0 {
		return nil, nil
	}
	doc := registry.DocumentFor(c.reg, api.MovesDocument)
	if doc == nil {
		c.note(true, "registry %s keeps no record beside the map: the data moves run unrecorded (a change cut in the middle leaves its cells fenced until they are called off by hand)", c.reg.Describe())
	}
	now := c.opts.Now().UTC()
	d := &movesDoc{doc: doc, MovesRecord: api.MovesRecord{Version: next.Version(), Change: next.Change(), Phase: api.MovesPreparing, Holder: c.cfg.Holder, Started: now}}
	for _, s := range specs {
		s.ID = fmt.Sprintf("v%d-%s-%s", next.Version(), s.From, s.To)
		admins := map[string][]string{}
		for _, id := range []string{s.From, s.To} {
			if cell, ok := next.Cell(id); ok {
				admins[id] = MoveAdmins(cell)
			} else if cell, ok := cur.Cell(id); ok {
				admins[id] = MoveAdmins(cell)
			}
		}
		d.Moves = append(d.Moves, api.MoveProgress{Spec: s, Admins: admins, Step: "recorded"})
	}
	if err := c.save(ctx, d); err != nil {
		return nil, err
	}
	if err := c.opts.Moves.Prepare(ctx, cur, d.Moves, func() error { return c.save(ctx, d) }); err != nil {
		if aerr := c.abortMoves(context.WithoutCancel(ctx), cur, d); aerr != nil {
			return nil, fmt.Errorf("%w; and calling the other moves off: %v ('cellctl move resume' finishes it)", err, aerr)
		}
		return nil, fmt.Errorf("%w; the map is unchanged (version %d)", err, cur.Version())
	}
	return d, nil
}

// finishMoves runs the steps after the map m is committed, then removes
// the record.
func (c *Controller) finishMoves(ctx context.Context, m *slotmap.Map, d *movesDoc) error {
	d.Phase = api.MovesCommitted
	if err := c.save(ctx, d); err != nil {
		return err
	}
	var errs []error
	for i := range d.Moves {
		if d.Moves[i].Step == "done" || d.Moves[i].Step == "skipped" {
			continue
		}
		if err := c.opts.Moves.Finish(ctx, m, &d.Moves[i]); err != nil {
			d.Moves[i].Error = err.Error()
			errs = append(errs, err)
		}
		if err := c.save(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return c.dropMoves(ctx, d)
}

// abortMoves calls every move of d off (the map m unchanged), then removes
// the record.
func (c *Controller) abortMoves(ctx context.Context, m *slotmap.Map, d *movesDoc) error {
	var errs []error
	for i := range d.Moves {
		if step := d.Moves[i].Step; step == "called-off" || step == "skipped" || step == "recorded" {
			// Called off, skipped, or never begun: nothing to undo.
			d.Moves[i].Step = cmp.Or(map[string]string{"recorded": "called-off"}[step], step)
			continue
		}
		if err := c.opts.Moves.Abort(ctx, m, &d.Moves[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.save(ctx, d); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return c.dropMoves(ctx, d)
}

func (c *Controller) dropMoves(ctx context.Context, d *movesDoc) error {
	if d.doc == nil {
		return nil
	}
	if err := d.doc.Delete(ctx, d.rev); err != nil {
		return fmt.Errorf("remove the data moves' record %s: %w", d.doc.Describe(), err)
	}
	return nil
}

// ResumeMoves finishes the data moves a change left under way: forward
// when the registry's map is the version they were for (or later), called
// off when it is older. The caller holds the writer lock.
func (c *Controller) ResumeMoves(ctx context.Context) error {
	if c.opts.Moves == nil {
		return errors.New("no mover: the data moves cannot be resumed")
	}
	d, err := c.loadMoves(ctx)
	if errors.Is(err, ErrNoMoves) {
		return nil
	}
	if err != nil {
		return err
	}
	m, err := c.Load(ctx)
	if err != nil {
		return err
	}
	if m.Version() >= d.Version {
		c.note(false, "Finishing the data moves of map version %d (%s), left under way by %s ...", d.Version, d.Change, d.Holder)
		if err := c.finishMoves(ctx, m, d); err != nil {
			return fmt.Errorf("finish the data moves of map version %d: %w", d.Version, err)
		}
		return nil
	}
	c.note(false, "Calling off the data moves of map version %d (%s), left under way by %s before the map changed ...", d.Version, d.Change, d.Holder)
	if err := c.abortMoves(ctx, m, d); err != nil {
		return fmt.Errorf("call off the data moves of map version %d: %w", d.Version, err)
	}
	return nil
}
