package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// InitChange asks for a new map: version 1 of an empty registry, or, with
// Force, an empty map in place of the one it holds, its version going on
// from the old one (followers take only versions that go up; every cell
// and override of the old one is forgotten).
type InitChange struct {
	// Map is the new map (slotmap.New: the slots and the agencies'
	// limits, no cells).
	Map    *slotmap.Map
	Force  bool
	DryRun bool
	// Planned, if set, sees the map about to be written and the one it
	// replaces (nil if none), before it is committed (or, in a dry run,
	// instead); again after a lost race.
	Planned func(next, replaces *slotmap.Map)
}

// InitResult is what an init did.
type InitResult struct {
	// Map is the map written (or, in a dry run, that would be).
	Map *slotmap.Map
	// Replaces is the version it replaced, 0 if none.
	Replaces int64
	DryRun   bool
	Applied  bool
}

// Init writes a new map (see InitChange) under the writer lock, with a
// compare-and-swap, planned again after a lost race up to MaxReplans
// times.
func (c *Controller) Init(ctx context.Context, ch InitChange) (*InitResult, error) {
	if !ch.DryRun {
		_, release, err := c.lock(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	for attempt := 0; ; attempt++ {
		cur, err := c.reg.Load(ctx)
		var old int64
		switch {
		case errors.Is(err, registry.ErrNoMap):
			cur = nil
		case err != nil:
			return nil, Explain(c.reg, err)
		case !ch.Force:
			return nil, fmt.Errorf("refused: registry %s already holds map version %d with %d cell%s; --force replaces it with an empty map",
				c.reg.Describe(), cur.Version(), len(cur.Cells()), plural(len(cur.Cells())))
		default:
			old = cur.Version()
		}
		next := ch.Map
		if old > 0 {
			if next, err = renumber(ch.Map, old+1); err != nil {
				return nil, err
			}
		}
		res := &InitResult{Map: next, Replaces: old, DryRun: ch.DryRun}
		if ch.Planned != nil {
			ch.Planned(next, cur)
		}
		if ch.DryRun {
			return res, nil
		}
		next = c.Noted(next)
		err = c.reg.CompareAndSwap(ctx, old, next)
		if errors.Is(err, registry.ErrConflict) && attempt < MaxReplans {
			c.note(false, "The map changed while this plan was made (%v): planning again (%d of %d).", err, attempt+1, MaxReplans)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("commit to registry %s failed: %v", c.reg.Describe(), err)
		}
		c.keep(ctx, next)
		res.Map, res.Applied = next, true
		return res, nil
	}
}

// renumber returns m as version v.
func renumber(m *slotmap.Map, v int64) (*slotmap.Map, error) {
	data, err := m.Encode()
	if err != nil {
		return nil, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	doc["version"] = json.RawMessage(strconv.FormatInt(v, 10))
	if data, err = json.Marshal(doc); err != nil {
		return nil, err
	}
	return slotmap.Decode(data)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
