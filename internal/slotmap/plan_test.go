package slotmap

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var testAgencies = map[string]int{"nice": 80, "kcb": 40}

func testCell(id string, weight int) Cell {
	return Cell{ID: id, Weight: weight, Intake: "http://127.0.0.1:8000/" + id, Admin: "http://127.0.0.1:9000/" + id}
}

// buildMap returns a map whose table is at its rendezvous target over cells
// c00, c01, ... with the given weights. It assembles the map directly (one
// pass over the slots) rather than through len(weights) AddCell plans.
func buildMap(t testing.TB, weights []int) *Map {
	t.Helper()
	m, err := New(DefaultSlots, testAgencies)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range weights {
		m.cells = append(m.cells, testCell(fmt.Sprintf("c%02d", i), w))
	}
	m.cells[0].State = Active
	for i := range m.cells {
		m.cells[i].State = Active
	}
	m.finish()
	m.claimSlots(0) // the table is empty: fills every slot with its winner
	return settled(t, m)
}

// settled derives m's quotas and lookup tables from what a test set, and
// fails unless the result is a valid map.
func settled(t testing.TB, m *Map) *Map {
	t.Helper()
	if err := m.recomputeQuotas(); err != nil {
		t.Fatal(err)
	}
	m.finish()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	return m
}

func equalWeights(n int) []int {
	w := make([]int, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

func randomWeights(rng *rand.Rand, n int) []int {
	w := make([]int, n)
	for i := range w {
		w[i] = 1 + rng.IntN(10)
	}
	return w
}

func mustEncode(t testing.TB, m *Map) []byte {
	t.Helper()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// encodedTable is the "table" part of a map's canonical encoding.
func encodedTable(t testing.TB, m *Map) string {
	t.Helper()
	b := string(mustEncode(t, m))
	return b[strings.Index(b, `"table":`):]
}

func TestPropertyAddCellMovesOnlyOntoNewCell(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	worst := 0.0
	for trial := 0; trial < 24; trial++ {
		n := 2 + rng.IntN(63)
		m := buildMap(t, equalWeights(n))
		p, err := m.AddCell(testCell("new", 1))
		if err != nil {
			t.Fatal(err)
		}
		for _, mv := range p.Moves {
			if mv.ToCell != "new" {
				t.Fatalf("N=%d: move %+v goes to %q, want only moves onto the new cell", n, mv, mv.ToCell)
			}
		}
		want := 1 / float64(n+1)
		dev := math.Abs(p.MovedFraction() - want)
		worst = math.Max(worst, dev)
		if dev > 0.01 {
			t.Errorf("N=%d: moved fraction %.4f, want 1/(N+1) = %.4f ± 0.01", n, p.MovedFraction(), want)
		}
		if got := p.After.SlotCounts()["new"]; got != p.MovedSlots {
			t.Errorf("N=%d: new cell owns %d slots, plan moved %d", n, got, p.MovedSlots)
		}
	}
	t.Logf("add cell, equal weights, 24 random N in 2..64: worst |moved/total - 1/(N+1)| = %.4f", worst)
}

// A cell added drained is named and owns nothing: no slot moves, it
// holds no session quota; its undrain then moves the same slots onto it
// as adding it active would have.
func TestAddedDrainedTakesItsSlotsOnUndrain(t *testing.T) {
	m := buildMap(t, equalWeights(4))
	c := testCell("new", 1)
	c.State = Drained
	p, err := m.AddCell(c)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := p.After.Cell("new")
	if !ok || got.State != Drained || p.MovedSlots != 0 || p.After.SlotCounts()["new"] != 0 || len(got.Quota) != 0 {
		t.Fatalf("added drained: in map %v, %s, %d slots moved, %d owned, quota %v; want drained, nothing moved or owned",
			ok, got.State, p.MovedSlots, p.After.SlotCounts()["new"], got.Quota)
	}
	u, err := p.After.Undrain("new")
	if err != nil {
		t.Fatal(err)
	}
	active, err := m.AddCell(testCell("new", 1))
	if err != nil {
		t.Fatal(err)
	}
	if encodedTable(t, u.After) != encodedTable(t, active.After) {
		t.Errorf("undrained after an add drained: its table differs from an add active's")
	}
	c.State = Draining
	if _, err := m.AddCell(c); err == nil || !strings.Contains(err.Error(), "starts active or drained") {
		t.Errorf("added draining: %v, want refused", err)
	}
}

func TestPropertyWeightedAddMovesOnlyOntoNewCell(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for trial := 0; trial < 12; trial++ {
		m := buildMap(t, randomWeights(rng, 2+rng.IntN(63)))
		p, err := m.AddCell(testCell("new", 1+rng.IntN(10)))
		if err != nil {
			t.Fatal(err)
		}
		for _, mv := range p.Moves {
			if mv.ToCell != "new" {
				t.Fatalf("move %+v goes to %q, want only the new cell", mv, mv.ToCell)
			}
		}
	}
}

func TestPropertyDrainMovesOnlyDrainedSlotsAndUndrainRestores(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for trial := 0; trial < 24; trial++ {
		n := 2 + rng.IntN(63)
		m := buildMap(t, randomWeights(rng, n))
		x := fmt.Sprintf("c%02d", rng.IntN(n))
		drain, err := m.Drain(x)
		if err != nil {
			t.Fatal(err)
		}
		if drain.MovedSlots != m.SlotCounts()[x] {
			t.Errorf("N=%d drain %s: moved %d slots, the cell owned %d", n, x, drain.MovedSlots, m.SlotCounts()[x])
		}
		for s := 0; s < m.Slots(); s++ {
			before, after := m.Owner(s), drain.After.Owner(s)
			if before != x && before != after {
				t.Fatalf("N=%d drain %s: slot %d moved %s → %s, want only %s's slots to move", n, x, s, before, after, x)
			}
			if after == x {
				t.Fatalf("N=%d drain %s: slot %d still on the drained cell", n, x, s)
			}
		}
		undrain, err := drain.After.Undrain(x)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := encodedTable(t, undrain.After), encodedTable(t, m); got != want {
			t.Fatalf("N=%d: drain then undrain %s changed the table", n, x)
		}
		// Through MarkDrained as well: the full drain lifecycle.
		done, err := drain.After.MarkDrained(x)
		if err != nil {
			t.Fatal(err)
		}
		back, err := done.After.Undrain(x)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal([]byte(encodedTable(t, back.After)), []byte(encodedTable(t, m))) {
			t.Fatalf("N=%d: drain, mark drained, undrain %s changed the table", n, x)
		}
	}
}

func TestPropertySlotSharesFollowWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	worst := 0.0
	for trial := 0; trial < 24; trial++ {
		weights := randomWeights(rng, 2+rng.IntN(63))
		if trial%3 == 0 {
			weights = equalWeights(len(weights))
		}
		m := buildMap(t, weights)
		total := 0
		for _, w := range weights {
			total += w
		}
		counts := m.SlotCounts()
		for i, w := range weights {
			id := fmt.Sprintf("c%02d", i)
			want := float64(m.Slots()) * float64(w) / float64(total)
			dev := math.Abs(float64(counts[id])-want) / float64(m.Slots())
			worst = math.Max(worst, dev)
			if dev > 0.01 {
				t.Errorf("N=%d: cell %s (weight %d/%d) owns %d slots, want %.0f ± 1%% of %d", len(weights), id, w, total, counts[id], want, m.Slots())
			}
		}
	}
	t.Logf("slot shares, 24 random cell sets: worst |slots - share| = %.4f of the slot count", worst)
}

func TestPropertySetWeightMovesOnlyToOrFromThatCell(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for trial := 0; trial < 12; trial++ {
		n := 2 + rng.IntN(30)
		m := buildMap(t, randomWeights(rng, n))
		x := fmt.Sprintf("c%02d", rng.IntN(n))
		p, err := m.SetWeight(x, 1+rng.IntN(20))
		if err != nil {
			t.Fatal(err)
		}
		for _, mv := range p.Moves {
			if mv.FromCell != x && mv.ToCell != x {
				t.Fatalf("weight %s: move %+v involves neither side", x, mv)
			}
		}
		if drift := p.After.Drift(); len(drift) != 0 {
			t.Fatalf("weight %s: %d slots off target after the change", x, len(drift))
		}
	}
}

func TestPropertyRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for trial := 0; trial < 16; trial++ {
		n := 2 + rng.IntN(20)
		m := buildMap(t, randomWeights(rng, n))
		// Give it overrides, a drained cell and a fixed quota.
		for i := 0; i < 20; i++ {
			p, err := m.SetOverride(fmt.Sprintf("user-%d", rng.IntN(1000)), fmt.Sprintf("c%02d", rng.IntN(n)))
			if err != nil {
				t.Fatal(err)
			}
			m = p.After
		}
		steps := []func(*Map) (*Plan, error){
			func(m *Map) (*Plan, error) { return m.Drain("c01") },
			func(m *Map) (*Plan, error) { return m.MarkDrained("c01") },
			func(m *Map) (*Plan, error) { return m.SetQuota("nice", "c00", 7) },
		}
		for _, step := range steps {
			p, err := step(m)
			if err != nil {
				t.Fatal(err)
			}
			m = p.After
		}
		enc := mustEncode(t, m)
		back, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(m)) = %v", err)
		}
		if enc2 := mustEncode(t, back); !bytes.Equal(enc, enc2) {
			t.Fatalf("decode(encode(m)) encodes differently")
		}
		if !slices.Equal(back.table, m.table) || back.version != m.version {
			t.Fatalf("decode(encode(m)) != m")
		}
		for u := range m.overrides {
			if m.Lookup(u) != back.Lookup(u) {
				t.Fatalf("Lookup(%q) differs after the round trip", u)
			}
		}
	}
}

func TestPlanningNeverMutatesItsInput(t *testing.T) {
	m := buildMap(t, []int{1, 2, 3, 4})
	p, err := m.SetOverride("pinned", "c03")
	if err != nil {
		t.Fatal(err)
	}
	m = p.After
	before := mustEncode(t, m)
	ops := map[string]func() (*Plan, error){
		"add":       func() (*Plan, error) { return m.AddCell(testCell("c09", 2)) },
		"drain":     func() (*Plan, error) { return m.Drain("c02") },
		"weight":    func() (*Plan, error) { return m.SetWeight("c01", 9) },
		"rebalance": func() (*Plan, error) { return m.Rebalance() },
		"override":  func() (*Plan, error) { return m.SetOverride("u", "c00") },
		"clear":     func() (*Plan, error) { return m.ClearOverride("pinned") },
		"quota":     func() (*Plan, error) { return m.SetQuota("kcb", "c00", 3) },
		"agency":    func() (*Plan, error) { return m.SetAgency("css", 10) },
		"endpoints": func() (*Plan, error) { return m.SetEndpoints("c00", "http://10.0.0.1:80", "http://10.0.0.1:81") },
	}
	for name, op := range ops {
		p, err := op()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := mustEncode(t, m); !bytes.Equal(got, before) {
			t.Fatalf("%s changed its input map", name)
		}
		if p.After.Version() != m.Version()+1 {
			t.Errorf("%s: new version %d, want %d", name, p.After.Version(), m.Version()+1)
		}
	}
}

func TestOperationErrors(t *testing.T) {
	m := buildMap(t, []int{1, 1})
	drained := func() *Map {
		p, err := m.Drain("c01")
		if err != nil {
			t.Fatal(err)
		}
		p, err = p.After.MarkDrained("c01")
		if err != nil {
			t.Fatal(err)
		}
		return p.After
	}()
	tests := []struct {
		name    string
		op      func() (*Plan, error)
		wantErr string
	}{
		{"drain unknown cell", func() (*Plan, error) { return m.Drain("c9") }, `unknown cell "c9"`},
		{"drain last active cell", func() (*Plan, error) { return drained.Drain("c00") }, `it is the last active cell`},
		{"drain a drained cell", func() (*Plan, error) { return drained.Drain("c01") }, `is drained, not active`},
		{"mark an active cell drained", func() (*Plan, error) { return m.MarkDrained("c00") }, `is active, not draining`},
		{"undrain an active cell", func() (*Plan, error) { return m.Undrain("c00") }, `already active`},
		{"add a duplicate", func() (*Plan, error) { return m.AddCell(testCell("c00", 1)) }, `duplicate cell id "c00"`},
		{"add with a bad url", func() (*Plan, error) {
			c := testCell("c05", 1)
			c.Intake = "localhost:80"
			return m.AddCell(c)
		}, `intake url "localhost:80"`},
		{"add with weight zero", func() (*Plan, error) { return m.AddCell(testCell("c05", 0)) }, `weight 0`},
		{"add a bad id", func() (*Plan, error) { return m.AddCell(testCell("-x", 1)) }, `cell id "-x"`},
		{"weight zero", func() (*Plan, error) { return m.SetWeight("c00", 0) }, `weight 0 must be in`},
		{"override to a drained cell", func() (*Plan, error) { return drained.SetOverride("u1", "c01") }, `cannot pin user "u1" to drained cell "c01"`},
		{"override with a bad user", func() (*Plan, error) { return m.SetOverride("a b", "c00") }, `user id "a b"`},
		{"clear a missing override", func() (*Plan, error) { return m.ClearOverride("nobody") }, `no override for user "nobody"`},
		{"quota over the limit", func() (*Plan, error) { return m.SetQuota("nice", "c00", 81) }, `quota 81 for "nice" must be in 0..80`},
		{"quota unknown agency", func() (*Plan, error) { return m.SetQuota("acme", "c00", 1) }, `unknown agency "acme"`},
		{"fixed quotas summing over the limit", func() (*Plan, error) {
			p, err := m.SetQuota("nice", "c00", 50)
			if err != nil {
				return nil, err
			}
			return p.After.SetQuota("nice", "c01", 40)
		}, `fixed quotas sum to 90, over its session limit 80`},
		{"remove an active cell", func() (*Plan, error) { return m.RemoveCell("c00") }, `drain it before removing it`},
		{"agency with limit zero", func() (*Plan, error) { return m.SetAgency("css", 0) }, `session limit 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tt.op()
			if err == nil {
				t.Fatalf("got plan %q, want error containing %q", p.Op, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %q, want ErrInvalid containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestQuotaSplit(t *testing.T) {
	m := buildMap(t, []int{1, 1, 1})
	// 80 over three equal cells: 27, 27, 26 (largest remainder, ties to the smaller id).
	for id, want := range map[string]int{"c00": 27, "c01": 27, "c02": 26} {
		if got := m.Quota(id, "nice"); got != want {
			t.Errorf("Quota(%s, nice) = %d, want %d", id, got, want)
		}
	}
	// Draining keeps the quota; drained hands it to the others.
	p, err := m.Drain("c02")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.After.Quota("c02", "nice"); got != 26 {
		t.Errorf("draining cell quota = %d, want it kept (26)", got)
	}
	p, err = p.After.MarkDrained("c02")
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"c00": 40, "c01": 40, "c02": 0} {
		if got := p.After.Quota(id, "nice"); got != want {
			t.Errorf("after drain: Quota(%s, nice) = %d, want %d", id, got, want)
		}
	}
	// A fixed quota is kept; the rest is split by weight.
	p, err = m.SetQuota("nice", "c00", 10)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"c00": 10, "c01": 35, "c02": 35} {
		if got := p.After.Quota(id, "nice"); got != want {
			t.Errorf("fixed: Quota(%s, nice) = %d, want %d", id, got, want)
		}
	}
	p, err = p.After.ClearQuota("nice", "c00")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.After.Quota("c00", "nice"); got != 27 {
		t.Errorf("cleared: Quota(c00, nice) = %d, want 27", got)
	}
}

func TestPropertyQuotaNeverExceedsLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 40; trial++ {
		n := 1 + rng.IntN(64)
		m := buildMap(t, randomWeights(rng, n))
		p, err := m.SetAgency("nice", 1+rng.IntN(200))
		if err != nil {
			t.Fatal(err)
		}
		m = p.After
		for _, agency := range m.AgencyNames() {
			sum := 0
			for _, c := range m.Cells() {
				sum += c.Quota[agency]
			}
			if limit := m.Agencies()[agency]; sum != limit {
				t.Fatalf("N=%d %s: quotas sum to %d, want the whole limit %d", n, agency, sum, limit)
			}
		}
	}
}

func TestFirstCellTakesEverySlotAndLastCellCanBeRemoved(t *testing.T) {
	m, err := New(64, testAgencies)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.AddCell(testCell("a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if p.MovedSlots != 64 || p.After.SlotCounts()["a"] != 64 {
		t.Fatalf("first cell: moved %d, owns %d; want all 64", p.MovedSlots, p.After.SlotCounts()["a"])
	}
	p, err = p.After.AddCell(testCell("b", 1))
	if err != nil {
		t.Fatal(err)
	}
	p, err = p.After.Drain("a")
	if err != nil {
		t.Fatal(err)
	}
	p, err = p.After.MarkDrained("a")
	if err != nil {
		t.Fatal(err)
	}
	p, err = p.After.RemoveCell("a")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.After.SlotCounts(); got["b"] != 64 || len(got) != 1 {
		t.Fatalf("after removing a: counts %v, want b owning all 64", got)
	}
	if _, err := Decode(mustEncode(t, p.After)); err != nil {
		t.Fatalf("map after remove does not decode: %v", err)
	}
}

func TestLookup(t *testing.T) {
	m := buildMap(t, []int{1, 1, 1, 1})
	p, err := m.SetOverride("vip-1", "c02")
	if err != nil {
		t.Fatal(err)
	}
	m2 := p.After
	if r := m2.Lookup("vip-1"); r.Cell != "c02" || !r.Override || r.Slot != m2.SlotOf("vip-1") {
		t.Errorf("Lookup(vip-1) = %+v, want override to c02", r)
	}
	for i := 0; i < 1000; i++ {
		u := fmt.Sprintf("user-%d", i)
		if r := m2.Lookup(u); r.Cell != m2.Owner(m2.SlotOf(u)) || r.Override {
			t.Fatalf("Lookup(%q) = %+v, want owner of slot %d (%s)", u, r, m2.SlotOf(u), m2.Owner(m2.SlotOf(u)))
		}
	}
	// An override to a draining cell is suspended, and restored on undrain.
	p, err = m2.Drain("c02")
	if err != nil {
		t.Fatal(err)
	}
	if r := p.After.Lookup("vip-1"); r.Override || r.Cell == "c02" {
		t.Errorf("Lookup(vip-1) with c02 draining = %+v, want the slot owner", r)
	}
	p, err = p.After.Undrain("c02")
	if err != nil {
		t.Fatal(err)
	}
	if r := p.After.Lookup("vip-1"); r.Cell != "c02" || !r.Override {
		t.Errorf("Lookup(vip-1) after undrain = %+v, want override to c02", r)
	}
	if allocs := testing.AllocsPerRun(1000, func() { _ = m2.Lookup("user-12345678901234567890") }); allocs != 0 {
		t.Errorf("Lookup allocates %.0f times, want 0", allocs)
	}
	if allocs := testing.AllocsPerRun(1000, func() { _ = m2.Lookup("vip-1") }); allocs != 0 {
		t.Errorf("Lookup of an override allocates %.0f times, want 0", allocs)
	}
}

func TestPlanDescribesMovesAndCells(t *testing.T) {
	m := buildMap(t, []int{1, 1, 1})
	p, err := m.Drain("c01")
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, mv := range p.Moves {
		if mv.FromCell != "c01" || mv.From > mv.To {
			t.Fatalf("bad move %+v", mv)
		}
		sum += mv.To - mv.From + 1
	}
	if sum != p.MovedSlots {
		t.Errorf("moves cover %d slots, MovedSlots = %d", sum, p.MovedSlots)
	}
	var c01 CellChange
	for _, c := range p.Cells {
		if c.ID == "c01" {
			c01 = c
		}
	}
	if c01.StateBefore != Active || c01.StateAfter != Draining || c01.SlotsAfter != 0 || c01.SlotsBefore != p.MovedSlots {
		t.Errorf("c01 change = %+v", c01)
	}
	if p.NoChange() {
		t.Error("a drain reports NoChange")
	}
	rb, err := m.Rebalance()
	if err != nil {
		t.Fatal(err)
	}
	if !rb.NoChange() || rb.MovedSlots != 0 {
		t.Errorf("rebalance of a map at target: NoChange=%v moved=%d, want no change", rb.NoChange(), rb.MovedSlots)
	}
	diff, err := Compare(m, p.After)
	if err != nil || diff.MovedSlots != p.MovedSlots {
		t.Errorf("Compare = %v, %v; want the drain's %d moved slots", diff, err, p.MovedSlots)
	}
}

func TestWinsAgreesWithWinner(t *testing.T) {
	m := buildMap(t, []int{3, 1, 4, 1, 5, 9, 2, 6})
	cands := m.candidates()
	for s := 0; s < m.Slots(); s++ {
		w := winner(cands, s)
		for _, c := range cands {
			if got := wins(cands, c.pos, m.table[s], s); got != (c.pos == w) {
				t.Fatalf("slot %d: wins(%s) = %v, winner is %s", s, c.id, got, m.cells[w].ID)
			}
		}
	}
}

// The last active cell can be drained only on purpose (DrainLast): its slots
// go to no one, the map stays valid, and an undrain takes every slot back.
func TestDrainLast(t *testing.T) {
	m := buildMap(t, []int{1, 1})
	if _, err := m.DrainLast("c00"); err == nil {
		t.Fatal("DrainLast with two active cells: want a refusal")
	}
	p, err := m.Drain("c00")
	if err != nil {
		t.Fatal(err)
	}
	m = p.After
	if _, err := m.Drain("c01"); err == nil {
		t.Fatal("Drain of the last active cell: want a refusal")
	}
	p, err = m.DrainLast("c01")
	if err != nil {
		t.Fatal(err)
	}
	last := p.After
	if err := last.Validate(); err != nil {
		t.Fatalf("after DrainLast: %v", err)
	}
	if r := last.Lookup("u-1"); r.Cell != "" {
		t.Errorf("Lookup after DrainLast = %+v, want no cell", r)
	}
	if n := p.MovedSlots; n != m.Slots() {
		t.Errorf("DrainLast moved %d slots, want all %d", n, m.Slots())
	}
	back, err := last.Undrain("c01")
	if err != nil {
		t.Fatal(err)
	}
	if got := back.After.SlotCounts()["c01"]; got != m.Slots() {
		t.Errorf("after undrain c01 owns %d slots, want all %d", got, m.Slots())
	}
}
