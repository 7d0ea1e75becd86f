package cellctl

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// hotKey is one heavy user as a router reports it. Decoding accepts the
// router's field names and those of internal/hotkeys' Report.
type hotKey struct {
	User  string
	Count int64
	Cell  string
}

func (h *hotKey) UnmarshalJSON(data []byte) error {
	var raw struct {
		User   string `json:"user"`
		UserID string `json:"user_id"`
		Key    string `json:"key"`
		Count  int64  `json:"count"`
		Cell   string `json:"cell"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	h.User = cmp.Or(raw.User, raw.UserID, raw.Key)
	h.Count, h.Cell = raw.Count, raw.Cell
	return nil
}

// hotReport is a router's answer: a list, or an object holding the list
// (and perhaps the window's total).
type hotReport struct {
	Total int64
	Keys  []hotKey
}

func (r *hotReport) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, &r.Keys); err == nil {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return fmt.Errorf("want a list of {user, count} or an object holding one")
	}
	if t, ok := obj["total"]; ok {
		_ = json.Unmarshal(t, &r.Total)
	}
	for _, k := range []string{"keys", "users", "hotkeys", "top", "items"} {
		if v, ok := obj[k]; ok {
			return json.Unmarshal(v, &r.Keys)
		}
	}
	return fmt.Errorf("no list of hot users in the answer")
}

type hotRow struct {
	User     string  `json:"user"`
	Count    int64   `json:"count"`
	Share    float64 `json:"share"`
	Slot     int     `json:"slot"`
	Cell     string  `json:"cell"`
	Override bool    `json:"override"`
	Propose  string  `json:"propose,omitempty"` // the cell to pin to
	Command  string  `json:"command,omitempty"`
}

type hotJSON struct {
	Routers []string `json:"routers"`
	Total   int64    `json:"total"`
	Version int64    `json:"version,omitempty"`
	Users   []hotRow `json:"users"`
}

func hotkeysCommand() *command {
	top := 10
	minShare := 0.01
	c := &command{
		name:      "hotkeys",
		argsUsage: "ROUTER_ADMIN_URL...",
		section:   secCells,
		summary:   "heavy users from the routers, with proposed overrides",
		help: `Asks each router's admin API for its heaviest users of the last minute
(GET URL/v1/admin/hotkeys), adds them up, and shows each with its request
count and share, the cell it goes to under the live map, and whether it is
pinned. It then proposes 'cellctl override set' lines that spread the
heaviest users over the active cells in proportion to their weight (a user
is moved only if it carries at least --min-share of the requests and the
move makes its cell less busy than the target becomes). It changes nothing.
Without a reachable registry the users are shown without cells.`,
		examples: `cellctl hotkeys http://127.0.0.1:9080
cellctl hotkeys http://router-a:9080 http://router-b:9080 --top 20`,
		minArgs: 1, maxArgs: -1,
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&top, "top", top, "show the `N` heaviest users")
			fs.Float64Var(&minShare, "min-share", minShare, "propose overrides only for users with at least this `share` of the requests")
		},
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		if top <= 0 {
			return usagef("--top must be positive")
		}
		res, err := gatherHotKeys(ctx, x, args, top)
		if err != nil {
			return err
		}
		var m *slotmap.Map
		if reg, err := x.openRegistry(); err == nil {
			m, err = x.load(ctx, reg)
			reg.Close()
			if err != nil {
				x.warnf("%v: users shown without cells", err)
			}
		} else {
			x.warnf("%v: users shown without cells", err)
		}
		if m != nil {
			res.Version = m.Version()
			for i := range res.Users {
				r := m.Lookup(res.Users[i].User)
				res.Users[i].Slot, res.Users[i].Cell, res.Users[i].Override = r.Slot, r.Cell, r.Override
			}
			propose(m, res.Users, minShare)
		}
		if x.g.json {
			return writeJSON(x.out, res)
		}
		writeHotKeys(x, res, m != nil)
		return nil
	}
	return c
}

// gatherHotKeys asks each router for its 2×top heaviest users and adds
// them up: the top users by requests, each with its share of all the
// requests counted. A router that does not answer is warned about; none
// answering is an error.
func gatherHotKeys(ctx context.Context, x *inv, args []string, top int) (hotJSON, error) {
	counts := map[string]int64{}
	var total int64
	var ok []string
	for _, raw := range args {
		target, err := hotkeysURL(raw, min(1000, 2*top))
		if err != nil {
			return hotJSON{}, usagef("router admin URL %q: %v", raw, err)
		}
		var rep hotReport
		if err := x.admin().Call(ctx, http.MethodGet, target, "", nil, &rep); err != nil {
			x.warnf("router %s: %v", raw, err)
			continue
		}
		ok = append(ok, raw)
		var sum int64
		for _, k := range rep.Keys {
			if k.User != "" {
				counts[k.User] += k.Count
				sum += k.Count
			}
		}
		total += max(rep.Total, sum)
	}
	if len(ok) == 0 {
		return hotJSON{}, fmt.Errorf("no router answered (%s)", strings.Join(args, ", "))
	}
	res := hotJSON{Routers: ok, Total: total, Users: []hotRow{}}
	for u, n := range counts {
		res.Users = append(res.Users, hotRow{User: u, Count: n})
	}
	slices.SortFunc(res.Users, func(a, b hotRow) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.User, b.User)) })
	res.Users = res.Users[:min(len(res.Users), top)]
	for i := range res.Users {
		if total > 0 {
			res.Users[i].Share = float64(res.Users[i].Count) / float64(total)
		}
	}
	return res, nil
}

// writeHotKeys prints the users as a table and, with a map (mapped), the
// proposed overrides.
func writeHotKeys(x *inv, res hotJSON, mapped bool) {
	fmt.Fprintf(x.out, "Heaviest users over %d router%s (%d requests counted):\n", len(res.Routers), plural(len(res.Routers)), res.Total)
	t := newTable(x.out, "USER", "REQUESTS", "SHARE", "SLOT", "CELL", "PINNED")
	for _, r := range res.Users {
		slot, cell, pinned := "-", "-", "-"
		if mapped {
			slot, cell, pinned = itoa(r.Slot), orNone(r.Cell), "no"
			if r.Override {
				pinned = "yes"
			}
		}
		t.row(r.User, fmt.Sprintf("%d", r.Count), fmt.Sprintf("%.1f%%", 100*r.Share), slot, cell, pinned)
	}
	t.flush()
	if !mapped {
		return
	}
	var lines []string
	for _, r := range res.Users {
		if r.Command != "" {
			lines = append(lines, r.Command)
		}
	}
	if len(lines) == 0 {
		fmt.Fprintf(x.out, "\nNo override proposed: these users are already spread over the active cells by weight.\n")
		return
	}
	fmt.Fprintf(x.out, "\nProposed overrides (spread these users over the active cells by weight):\n")
	for _, l := range lines {
		fmt.Fprintf(x.out, "  %s\n", l)
	}
}

// hotkeysURL is the hot keys endpoint of a router admin URL (the URL itself
// if it has a path, else URL/v1/admin/hotkeys), asking for n users. More
// than the users shown are asked for, so that sums over routers are right
// for users near the cut.
func hotkeysURL(raw string, n int) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("want http://HOST:PORT")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = api.PathRouterHotKeys
	}
	q := u.Query()
	if q.Get("n") == "" {
		q.Set("n", strconv.Itoa(n))
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// propose picks, heaviest first, users with at least minShare of the
// requests whose move to the least loaded active cell (load = hot requests
// per unit of weight) leaves their current cell busier than the target
// becomes. It fills Propose and Command.
func propose(m *slotmap.Map, users []hotRow, minShare float64) {
	active := m.ActiveCells()
	if len(active) < 2 {
		return
	}
	weight := map[string]float64{}
	load := map[string]float64{}
	for _, id := range active {
		c, _ := m.Cell(id)
		weight[id] = float64(c.Weight)
	}
	for _, u := range users {
		if _, ok := weight[u.Cell]; ok {
			load[u.Cell] += float64(u.Count)
		}
	}
	for i := range users {
		u := &users[i]
		cur := u.Cell
		if _, ok := weight[cur]; !ok || !api.ValidUserID(u.User) || u.Share < minShare {
			continue
		}
		best := ""
		for _, id := range active {
			if best == "" || load[id]/weight[id] < load[best]/weight[best] {
				best = id
			}
		}
		n := float64(u.Count)
		if best == cur || (load[best]+n)/weight[best] >= load[cur]/weight[cur] {
			continue
		}
		load[cur] -= n
		load[best] += n
		u.Propose = best
		u.Command = fmt.Sprintf("cellctl override set %s %s", u.User, best)
	}
}
