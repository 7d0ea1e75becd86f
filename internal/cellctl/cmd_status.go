package cellctl

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// statusJSON is the machine form of 'cellctl status'.
type statusJSON struct {
	Registry   string       `json:"registry"`
	Version    int64        `json:"version"`
	Change     string       `json:"change"`
	Updated    time.Time    `json:"updated,omitzero"`
	AgeSeconds float64      `json:"age_seconds"`
	Slots      int          `json:"slots"`
	Cells      []cellStatus `json:"cells"`
}

// cellStatus is one cell: what the map says and what its admin API said.
type cellStatus struct {
	ID        string          `json:"id"`
	State     slotmap.State   `json:"state"`
	Weight    int             `json:"weight"`
	Slots     int             `json:"slots"`
	UsersPct  float64         `json:"users_pct"`
	Quota     map[string]int  `json:"quota"`
	Admin     string          `json:"admin"`
	Reachable bool            `json:"reachable"`
	Error     string          `json:"error,omitempty"`
	Status    *api.CellStatus `json:"status,omitempty"`
	// Instances of a cell of several processes, each as its admin API
	// reports it; the cell's Status is its first ready instance's.
	Instances []instanceStatus `json:"instances,omitempty"`
}

// instanceStatus is one instance of a cell and what its admin API said.
type instanceStatus struct {
	ID        string `json:"id"`
	Intake    string `json:"intake"`
	Admin     string `json:"admin"`
	Drained   bool   `json:"drained"`
	Reachable bool   `json:"reachable"`
	Ready     bool   `json:"ready"`
	Error     string `json:"error,omitempty"`

	status *api.CellStatus
}

func statusCommand() *command {
	c := &command{
		name:    "status",
		section: secCells,
		summary: "one row per cell: map state and what the cell reports",
		help: `Shows the map version and its age, then one row per cell: its state, weight,
slots and share of users (from the map), and from its admin API: ready or not,
queue depth per lane (high/normal), oldest pending age, in flight, sessions in
use/pool size per agency, breaker states, failed inquiries (error stream/DLQ),
the store's use and the release it runs (version@digest: the binary and the
flags that change what it does; "mixed" when a cell's instances differ).
A cell of several instances has a row per instance under its own (in
rotation or drained, ready, unreachable); its figures are those of a ready
instance (the queue, store and quotas are the cell's). A cell whose admin API
does not answer is shown as unreachable; the command still succeeds. Cells
are asked in parallel, each for at most 5 s.`,
		examples: `cellctl status
cellctl status --json | jq '.cells[] | select(.reachable | not) | .id'`,
		maxArgs: 0,
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		reg, m, err := x.loadOnly(ctx)
		if err != nil {
			return err
		}
		defer reg.Close()
		st := x.collectStatus(ctx, m)
		st.Registry = reg.Describe()
		if x.g.json {
			return writeJSON(x.out, st)
		}
		x.writeStatus(m, st)
		return nil
	}
	return c
}

// collectStatus asks every cell that is not drained for its status, in
// parallel.
func (x *inv) collectStatus(ctx context.Context, m *slotmap.Map) statusJSON {
	st := statusJSON{Version: m.Version(), Change: m.Change(), Updated: m.Updated(), Slots: m.Slots(), Cells: []cellStatus{}}
	if !m.Updated().IsZero() {
		st.AgeSeconds = x.cli.now().Sub(m.Updated()).Seconds()
	}
	counts := m.SlotCounts()
	cells := m.Cells()
	st.Cells = make([]cellStatus, len(cells))
	ac := x.admin()
	var wg sync.WaitGroup
	for i, c := range cells {
		cs := &st.Cells[i]
		*cs = cellStatus{ID: c.ID, State: c.State, Weight: c.Weight, Slots: counts[c.ID], Quota: c.Quota, Admin: c.Admin}
		if cs.Quota == nil {
			cs.Quota = map[string]int{}
		}
		if m.Slots() > 0 {
			cs.UsersPct = 100 * float64(cs.Slots) / float64(m.Slots())
		}
		if len(c.Instances) > 0 {
			cs.Instances = make([]instanceStatus, len(c.Instances))
			for j, in := range c.Instances {
				is := &cs.Instances[j]
				*is = instanceStatus{ID: in.ID, Intake: in.Intake, Admin: in.Admin, Drained: in.Drained}
				wg.Go(func() {
					s, err := ac.Status(ctx, in.Admin)
					if err != nil {
						is.Error, is.Reachable = err.Error(), !adminclient.Unreachable(err)
						return
					}
					is.Reachable, is.Ready, is.status = true, s.Ready, s
				})
			}
			continue
		}
		wg.Go(func() {
			s, err := ac.Status(ctx, c.Admin)
			if err != nil {
				cs.Error = err.Error()
				cs.Reachable = !adminclient.Unreachable(err)
				return
			}
			cs.Reachable, cs.Status = true, s
		})
	}
	wg.Wait()
	for i := range st.Cells {
		cs := &st.Cells[i]
		if len(cs.Instances) == 0 {
			continue
		}
		// The queue, the store and the quotas are the cell's, shared by its
		// instances: the cell reports what its first ready instance (else
		// its first reachable one) says.
		var errs []string
		for _, pass := range []func(instanceStatus) bool{
			func(is instanceStatus) bool { return is.Ready },
			func(is instanceStatus) bool { return is.Reachable },
		} {
			for _, is := range cs.Instances {
				if cs.Status == nil && is.status != nil && pass(is) {
					cs.Status, cs.Reachable = is.status, true
				}
			}
		}
		for _, is := range cs.Instances {
			if is.Error != "" {
				errs = append(errs, is.ID+": "+is.Error)
			}
		}
		if cs.Status == nil {
			cs.Error = strings.Join(errs, "; ")
		}
	}
	return st
}

// writeStatus prints the cells as a table, each cell's instances under
// its row, and then the notes on what needs a look.
func (x *inv) writeStatus(m *slotmap.Map, st statusJSON) {
	w := x.out
	fmt.Fprintf(w, "%s\n", x.mapHeader(m))
	fmt.Fprintf(w, "Registry %s\n\n", st.Registry)
	if len(st.Cells) == 0 {
		fmt.Fprintf(w, "No cells yet: add one with 'cellctl provision'.\n")
		return
	}
	agencies := m.AgencyNames()
	header := []string{"CELL", "STATE", "WEIGHT", "SLOTS", "USERS", "READY", "QUEUE H/N", "OLDEST", "IN FLIGHT"}
	for _, a := range agencies {
		header = append(header, strings.ToUpper(a))
	}
	header = append(header, "BREAKERS", "FAILED/DLQ", "STORE", "RELEASE")
	t := newTable(w, header...)
	var notes []string
	for _, c := range st.Cells {
		row := []string{c.ID, string(c.State), itoa(c.Weight), itoa(c.Slots), pct(c.Slots, st.Slots)}
		if c.Status == nil {
			what := "unreachable"
			if c.Reachable {
				what = "error"
			}
			row = append(row, what)
			notes = append(notes, fmt.Sprintf("%s: %s", c.ID, c.Error))
		} else {
			cells, cellNotes := statusColumns(c, m, agencies)
			row, notes = append(row, cells...), append(notes, cellNotes...)
		}
		t.row(row...)
		notes = append(notes, instanceRows(t, len(header), c)...)
	}
	t.flush()
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "%s\n", n)
		}
	}
}

// statusColumns are a reachable cell's columns from READY on, and the
// notes on what in them needs a look.
func statusColumns(c cellStatus, m *slotmap.Map, agencies []string) (row, notes []string) {
	s := c.Status
	ready := "yes"
	if !s.Ready {
		ready = "no"
		if c.State == slotmap.Active {
			notes = append(notes, fmt.Sprintf("%s not ready: %s", c.ID, orNone(s.NotReady())))
		}
	}
	if !s.IntakeOpen() && c.State == slotmap.Active {
		notes = append(notes, fmt.Sprintf("%s: intake closed although the cell is active ('cellctl undrain %s' reopens it)", c.ID, c.ID))
	}
	if s.Map.Version != 0 && s.Map.Version != m.Version() {
		notes = append(notes, fmt.Sprintf("%s is on map version %d (registry %d)", c.ID, s.Map.Version, m.Version()))
	}
	queue, oldest := fmt.Sprintf("%d/%d", s.High(), s.Normal()), ageStr(s.OldestPending())
	if !s.Known() {
		queue, oldest = "?", "?"
		notes = append(notes, fmt.Sprintf("%s cannot read its queue: %s", c.ID, strings.Join(mapValues(s.Errors), "; ")))
	}
	row = append(row, ready, queue, oldest, fmt.Sprintf("%d", s.Inflight))
	var breakers []string
	for _, a := range agencies {
		as, ok := s.Agencies[a]
		if !ok {
			row = append(row, "-")
			continue
		}
		row = append(row, fmt.Sprintf("%d/%d", as.Pool.InUse, as.Pool.Size))
		if as.Breaker != "" && as.Breaker != "closed" {
			breakers = append(breakers, a+"="+as.Breaker)
		}
	}
	// Agencies the cell knows that the map does not (should not happen).
	for _, a := range slices.Sorted(maps.Keys(s.Agencies)) {
		if !slices.Contains(agencies, a) && s.Agencies[a].Breaker != "" && s.Agencies[a].Breaker != "closed" {
			breakers = append(breakers, a+"="+s.Agencies[a].Breaker)
		}
	}
	b := "closed"
	if len(breakers) > 0 {
		b = strings.Join(breakers, ",")
	}
	rel := releaseText(s.Release.ID)
	if ids := instanceReleases(c); len(ids) > 1 {
		rel = "mixed"
		notes = append(notes, fmt.Sprintf("%s's instances run different releases: %s", c.ID, strings.Join(ids, ", ")))
	}
	row = append(row, b, fmt.Sprintf("%d/%d", s.Failed, s.DLQ), storeText(s), rel)
	if st := s.Store; st != nil && (st.Refusing || st.Failed != "") {
		why := fmt.Sprintf("its store's filesystem is %.1f%% in use (high watermark %.0f%%)", 100*st.Used, 100*st.High)
		if st.Failed != "" {
			why = "its store failed a write (" + st.Failed + "); it restarts its NATS once there is room"
		}
		notes = append(notes, fmt.Sprintf("%s refuses new inquiries: %s", c.ID, why))
	}
	return row, notes
}

// instanceRows writes a cell's instances under its row (width columns),
// and gives the notes on those that answered with an error.
func instanceRows(t *table, width int, c cellStatus) (notes []string) {
	for _, is := range c.Instances {
		state := "in rotation"
		if is.Drained {
			state = "drained"
		}
		ready := "yes"
		switch {
		case !is.Reachable && is.Error != "":
			ready = "unreachable"
			notes = append(notes, fmt.Sprintf("%s/%s: %s", c.ID, is.ID, is.Error))
		case is.Error != "":
			ready = "error"
			notes = append(notes, fmt.Sprintf("%s/%s: %s", c.ID, is.ID, is.Error))
		case !is.Ready:
			ready = "no"
		}
		row := make([]string, width)
		row[0], row[1], row[5] = "  "+c.ID+"/"+is.ID, state, ready
		if is.status != nil {
			row[len(row)-1] = releaseText(is.status.Release.ID)
		}
		t.row(row...)
	}
	return notes
}

// releaseText is a release id for the table ("-": none reported).
func releaseText(id string) string {
	if id == "" {
		return "-"
	}
	return id
}

// instanceReleases are the releases c's reachable instances report, as
// "i1 ID", when they are not all the same (nil when they are).
func instanceReleases(c cellStatus) []string {
	var out []string
	seen := map[string]bool{}
	for _, is := range c.Instances {
		if is.status != nil {
			seen[is.status.Release.ID] = true
			out = append(out, is.ID+" "+releaseText(is.status.Release.ID))
		}
	}
	if len(seen) < 2 {
		return nil
	}
	return out
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, k := range sortedKeys(m) {
		out = append(out, k+": "+m[k])
	}
	return out
}
