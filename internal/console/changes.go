package console

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// noteChanges adds to the change log what differs from prev to v (the
// collector's lock held), and forgets what is older than ChangesKept.
func (c *collector) noteChanges(prev, v *View) {
	add := func(what, format string, args ...any) {
		c.changes = append(c.changes, Change{At: v.At, What: what, Text: fmt.Sprintf(format, args...)})
	}
	if prev != nil {
		if prev.Registry.OK != v.Registry.OK {
			if v.Registry.OK {
				add("registry", "the registry answers again")
			} else {
				add("registry", "the registry cannot be read: %s", v.Registry.Error)
			}
		}
		if prev.Map != nil && v.Map != nil && prev.Map.Version != v.Map.Version {
			add("map", "map v%d → v%d: %s", prev.Map.Version, v.Map.Version, cmp.Or(v.Map.Change, "changed"))
		}
		before := map[string]CellCard{}
		for _, card := range prev.Cells {
			before[card.ID] = card
		}
		for _, card := range v.Cells {
			old, ok := before[card.ID]
			switch {
			case !ok:
				add(card.ID, "new in the map (%s)", card.State)
				continue
			case old.State != card.State:
				add(card.ID, "%s → %s in the map", old.State, card.State)
			}
			if old.Health != card.Health {
				add(card.ID, "%s%s", card.Health, because(card.Why))
			}
			if old.Release != card.Release && old.Release != "" && card.Release != "" {
				add(card.ID, "release %s → %s", old.Release, card.Release)
			}
		}
		rbefore := map[string]RouterCard{}
		for _, r := range prev.Routers {
			rbefore[r.Admin] = r
		}
		for _, r := range v.Routers {
			if old, ok := rbefore[r.Admin]; !ok {
				add(r.ID, "router announced")
			} else if old.Health != r.Health {
				add(r.ID, "%s%s", r.Health, because(r.Why))
			}
		}
		switch o, n := prev.Rollout, v.Rollout; {
		case n == nil:
		case o == nil || o.ID != n.ID:
			add("rollout", "rollout %s %s", n.ID, n.State)
		case o.State != n.State || o.Wave != n.Wave:
			add("rollout", "rollout %s %s, wave %d of %d", n.ID, n.State, min(n.Wave+1, len(n.Waves)), len(n.Waves))
		}
	}
	keep := v.At.Add(-c.cfg.ChangesKept)
	i := 0
	for i < len(c.changes) && c.changes[i].At.Before(keep) {
		i++
	}
	c.changes = c.changes[i:]
	if n := len(c.changes) - maxChanges; n > 0 {
		c.changes = c.changes[n:]
	}
}

// maxChanges bounds the change log, whatever the churn.
const maxChanges = 200

func because(why string) string {
	if why == "" {
		return ""
	}
	return ": " + why
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
