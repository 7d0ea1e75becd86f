package cellctl

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// agencyFlag collects repeated --agency NAME=LIMIT.
type agencyFlag map[string]int

func (a agencyFlag) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		parts = append(parts, k+"="+strconv.Itoa(a[k]))
	}
	return strings.Join(parts, ",")
}

func (a agencyFlag) Set(s string) error {
	name, limit, ok := strings.Cut(s, "=")
	n, err := strconv.Atoi(limit)
	if !ok || name == "" || err != nil {
		return fmt.Errorf("want NAME=SESSIONS, like nice=80")
	}
	if _, dup := a[name]; dup {
		return fmt.Errorf("agency %q given twice", name)
	}
	a[name] = n
	return nil
}

// limitsStr renders agency limits: "kcb 40, nice 80".
func limitsStr(limits map[string]int) string {
	if len(limits) == 0 {
		return "none"
	}
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(limits)) {
		parts = append(parts, fmt.Sprintf("%s %d", a, limits[a]))
	}
	return strings.Join(parts, ", ")
}

func provisionCommand() *command {
	var intake, admin string
	var weight int
	c := &command{
		name:      "provision",
		argsUsage: "CELL",
		section:   secMap,
		summary:   "add an active cell; slots move only onto it",
		help: `Adds CELL to the map as an active cell with its intake and admin URLs. It
takes about weight/Σweights of the slots, only from the other cells (weighted
rendezvous hashing), and its share of every agency's session quota.

CELL is 1-32 of [a-z0-9-]; it prefixes the ids of the cell's inquiries, so it
cannot be reused while the old cell is in the map.`,
		examples: `cellctl provision c4 --intake http://10.0.1.8:8081 --admin http://10.0.1.8:9081
cellctl provision c5 --intake http://c5:8081 --admin http://c5:9081 --weight 2 --dry-run`,
		minArgs: 1, maxArgs: 1,
		mutates: true, moves: true,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&intake, "intake", "", "base `URL` of the cell's intake API (required)")
			fs.StringVar(&admin, "admin", "", "base `URL` of the cell's admin API (required)")
			fs.IntVar(&weight, "weight", 1, "relative share of slots and sessions, `W` ≥ 1")
		},
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		if intake == "" || admin == "" {
			return usagef("--intake URL and --admin URL are required")
		}
		id := args[0]
		return x.applyAndReport(ctx, control.Provision(slotmap.Cell{ID: id, Weight: weight, Intake: intake, Admin: admin}))
	}
	return c
}

// knownCell refuses an unknown cell id with the list of cells.
func undrainCommand() *command {
	c := &command{
		name:      "undrain",
		argsUsage: "CELL",
		section:   secMap,
		summary:   "make a draining or drained cell active again",
		help: `Makes CELL active again: it takes back exactly the slots it had before its
drain (drain then undrain is the identity), its session quota is derived again,
and its intake is reopened through its admin API (a warning if that cannot be
reached: reopen it later with another undrain, or on the cell).`,
		examples: `cellctl undrain c2
cellctl undrain c2 --dry-run`,
		minArgs: 1, maxArgs: 1,
		mutates: true, moves: true,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		id := args[0]
		reg, err := x.openRegistry()
		if err != nil {
			return err
		}
		defer reg.Close()
		res, err := x.apply(ctx, reg, control.Undrain(id))
		if err != nil {
			return err
		}
		out := struct {
			*applyResult
			Intake string `json:"intake,omitempty"`
		}{applyResult: res}
		if res.Applied {
			cell, _ := res.Plan.After.Cell(id)
			if err := x.admin().SetIntakes(ctx, cell, true); err != nil {
				x.warnf("cell %s is active again, but its intake could not be reopened: %v", id, err)
				out.Intake = "unknown"
			} else {
				out.Intake = "open"
				if !x.g.json {
					fmt.Fprintf(x.out, "Intake of %s reopened.\n", id)
				}
			}
		}
		if x.g.json {
			return writeJSON(x.out, out)
		}
		return nil
	}
	return c
}

func weightCommand() *command {
	c := &command{
		name:      "weight",
		argsUsage: "CELL W",
		section:   secMap,
		summary:   "set a cell's weight; only slots to or from it move",
		help: `Sets CELL's weight, its relative share of slots and of derived session quotas
(1..1000000). Only slots that move to or from CELL change owner.`,
		examples: `cellctl weight c3 2
cellctl weight c3 1 --dry-run`,
		minArgs: 2, maxArgs: 2,
		mutates: true, moves: true,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		id := args[0]
		w, err := intArg("weight", args[1])
		if err != nil {
			return err
		}
		return x.applyAndReport(ctx, control.SetWeight(id, w))
	}
	return c
}

func rebalanceCommand() *command {
	by := "slots"
	c := &command{
		name:    "rebalance",
		section: secMap,
		summary: "move every slot to its target, or weigh cells to even out measured traffic",
		help: `Moves every slot whose owner differs from its target (weighted rendezvous
over the active cells) to the target. A map changed only through cellctl has
no such drift; 'cellctl verify' shows it when there is some.

With --by traffic it reads the traffic the routers measured (the routers
announced in the registry, or --routers) and
proposes new weights for the active cells that even out their load: each
cell's share follows its declared capacity when every active cell has one
('cellctl capacity set'), else it is even. It tries a few rounds and keeps
the one nearest even, moving the fewest slots among those about as good.
The plan shows every cell's projected req/s before → after; run it with
--dry-run first. One hot user cannot be split by weights: 'cellctl hotkeys'
proposes overrides for those.`,
		examples: `cellctl rebalance --dry-run
cellctl rebalance
cellctl rebalance --by traffic --routers http://router-a:9080,http://router-b:9080 --dry-run`,
		maxArgs: 0,
		mutates: true, moves: true,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&by, "by", by, "`WHAT` to even out: slots (each slot to its target) or traffic (weights from the routers' measured load)")
		},
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		switch by {
		case "slots":
			return x.applyAndReport(ctx, control.Rebalance())
		case "traffic":
			urls, err := x.routerURLs(ctx)
			if err != nil {
				return err
			}
			if len(urls) == 0 {
				return usagef("--by traffic needs the routers: none is announced in the registry; give their admin URLs with --routers URLS (or CELLKIT_ROUTERS)")
			}
			return x.applyAndReport(ctx, control.BalanceByTraffic(func(slots int) (*slotmap.Traffic, error) {
				tr, _, err := x.traffic(ctx, slots)
				return tr, err
			}))
		}
		return usagef("--by %q: want slots or traffic", by)
	}
	return c
}

func capacityCommand() *command {
	c := &command{
		name:      "capacity set",
		argsUsage: "CELL RATE",
		section:   secMap,
		summary:   "declare the request rate a cell can take (plans flag a cell over it)",
		help: `Declares the request rate CELL can take, as N or N/s (requests per second;
0 clears it). Nothing moves: plans made with --routers show each cell's
projected traffic beside it and flag a cell projected over it, and
'rebalance --by traffic' shares traffic by it when every active cell has one.`,
		examples: `cellctl capacity set c1 400/s
cellctl capacity set c1 0`,
		minArgs: 2, maxArgs: 2,
		mutates: true,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		id := args[0]
		n, err := intArg("capacity", strings.TrimSuffix(args[1], "/s"))
		if err != nil {
			return err
		}
		return x.applyAndReport(ctx, control.SetCapacity(id, n))
	}
	return c
}

func removeCommand() *command {
	c := &command{
		name:      "remove",
		argsUsage: "CELL",
		section:   secMap,
		summary:   "delete a drained cell from the map, moving what it still holds",
		help: `Deletes a drained cell from the map (its id becomes free again). Refused for
a cell that is not drained or that users are still pinned to.

Whatever the cell still holds of any user (inquiries a change left there with
--leave-data) first moves to the user's cell, verified, so that its users keep
reading their history. A cell that does not answer cannot hand anything over:
the remove is refused, nothing changed, unless --force removes it all the
same, and what it held is lost with it.`,
		examples: `cellctl remove c2
cellctl remove c2 --force    # c2 is gone for good, and its store with it`,
		minArgs: 1, maxArgs: 1,
		mutates: true, moves: true, leave: "force",
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		return x.applyAndReport(ctx, control.Remove(args[0]))
	}
	return c
}

func endpointsCommand() *command {
	var intake, admin string
	c := &command{
		name:      "endpoints",
		argsUsage: "CELL",
		section:   secMap,
		summary:   "change a cell's intake or admin URL",
		help:      `Changes the intake and/or admin URL of CELL. No slot moves.`,
		examples:  `cellctl endpoints c1 --intake http://10.0.1.9:8081 --admin http://10.0.1.9:9081`,
		minArgs:   1, maxArgs: 1,
		mutates: true,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&intake, "intake", "", "new base `URL` of the intake API")
			fs.StringVar(&admin, "admin", "", "new base `URL` of the admin API")
		},
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		if intake == "" && admin == "" {
			return usagef("give --intake URL, --admin URL or both")
		}
		id := args[0]
		return x.applyAndReport(ctx, control.SetEndpoints(id, intake, admin))
	}
	return c
}

// intArg parses a whole-number argument; anything else is a usage error.
func intArg(what, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, usagef("%s %q is not a whole number", what, s)
	}
	return n, nil
}
