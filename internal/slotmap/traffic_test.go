package slotmap

import (
	"math"
	"math/rand/v2"
	"testing"
)

// zipfTraffic is traffic over m's slots from users drawn Zipf-like: slot
// rates from a heavy-tailed draw, a few slots much hotter than the rest.
func zipfTraffic(m *Map, seed uint64, total float64) Traffic {
	rng := rand.New(rand.NewPCG(seed, seed))
	t := Traffic{Slots: make([]float64, m.Slots())}
	sum := 0.0
	for s := range t.Slots {
		t.Slots[s] = math.Pow(rng.Float64(), 3) // heavy towards 0, a few near 1
		sum += t.Slots[s]
	}
	for s := range t.Slots {
		t.Slots[s] *= total / sum
	}
	return t
}

func TestLoadFollowsSlotsAndPins(t *testing.T) {
	m := buildMap(t, []int{1, 1, 1})
	tr := Traffic{Slots: make([]float64, m.Slots())}
	for s := range tr.Slots {
		tr.Slots[s] = 1
	}
	load, err := m.Load(tr)
	if err != nil {
		t.Fatal(err)
	}
	counts := m.SlotCounts()
	for id, n := range counts {
		if load[id] != float64(n) {
			t.Errorf("%s: %v req/s, want its %d slots × 1", id, load[id], n)
		}
	}
	// A heavy user pinned away takes its rate (at most its slot's) along.
	user := "heavy-user"
	slot := m.SlotOf(user)
	owner := m.Owner(slot)
	to := "c00"
	if owner == to {
		to = "c01"
	}
	p, err := m.SetOverride(user, to)
	if err != nil {
		t.Fatal(err)
	}
	tr.Slots[slot] = 50
	tr.Users = map[string]float64{user: 40, "unpinned": 7}
	if err := p.Project(tr); err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Cells {
		want := 0.0
		switch c.ID {
		case owner:
			want = -40
		case to:
			want = 40
		}
		if got := *c.RateAfter - *c.RateBefore; got != want {
			t.Errorf("%s: projected %+v req/s by the pin, want %+v", c.ID, got, want)
		}
	}
	if _, err := m.Load(Traffic{Slots: make([]float64, 8)}); err == nil {
		t.Error("traffic of another slot count was projected")
	}
}

func TestSetWeightsMovesOnlyTheChangedCells(t *testing.T) {
	m := buildMap(t, []int{2, 2, 2, 2})
	p, err := m.SetWeights(map[string]int{"c01": 4, "c02": 2})
	if err != nil {
		t.Fatal(err)
	}
	one, err := m.SetWeight("c01", 4)
	if err != nil {
		t.Fatal(err)
	}
	if p.MovedSlots != one.MovedSlots || p.Op != "weights c01 4" {
		t.Fatalf("SetWeights moved %d slots (%q), SetWeight %d", p.MovedSlots, p.Op, one.MovedSlots)
	}
	for _, mv := range p.Moves {
		if mv.ToCell != "c01" {
			t.Fatalf("a slot moved to %s, not to the heavier c01: %+v", mv.ToCell, mv)
		}
	}
	if err := p.After.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetWeights(map[string]int{"c09": 1}); err == nil {
		t.Error("an unknown cell was weighted")
	}
	if _, err := m.SetWeights(map[string]int{"c01": 0}); err == nil {
		t.Error("a weight of 0 was taken")
	}
}

// TestBalanceByTrafficEvensLoad: slots of skewed traffic, cells of equal
// weight: the proposed weights bring the busiest cell closer to its fair
// share, and with declared capacities the share follows them.
func TestBalanceByTrafficEvensLoad(t *testing.T) {
	m := buildMap(t, []int{1, 1, 1, 1, 1, 1, 1, 1})
	tr := zipfTraffic(m, 3, 1000)
	// Make c03's slots twice as hot: the imbalance weights can fix.
	for s := range tr.Slots {
		if m.Owner(s) == "c03" {
			tr.Slots[s] *= 2
		}
	}
	load, _ := m.Load(tr)
	before := m.Imbalance(load)
	p, err := m.BalanceByTraffic(tr)
	if err != nil {
		t.Fatal(err)
	}
	load, _ = p.After.Load(tr)
	after := p.After.Imbalance(load)
	t.Logf("imbalance %.3f → %.3f moving %d slots (%s)", before, after, p.MovedSlots, p.Op)
	if before < 1.5 || after > 1.1 || p.MovedSlots == 0 {
		t.Fatalf("imbalance %.3f → %.3f moving %d slots (%s); want from over 1.5 to within 1.1", before, after, p.MovedSlots, p.Op)
	}
	if err := p.After.Validate(); err != nil {
		t.Fatal(err)
	}

	// Declared capacities: c00 may take three times the others.
	m2 := p.After.clone()
	for i := range m2.cells {
		m2.cells[i].Capacity = 100
	}
	m2.cells[0].Capacity = 300
	q, err := m2.BalanceByTraffic(tr)
	if err != nil {
		t.Fatal(err)
	}
	load, _ = q.After.Load(tr)
	share := load["c00"] / tr.Total()
	t.Logf("with capacities: c00 takes %.3f (%s, %d slots moved)", share, q.Op, q.MovedSlots)
	if want := 3.0 / 10; math.Abs(share-want) > 0.03 {
		t.Fatalf("c00 with 3/10 of the capacity takes %.3f of the traffic", share)
	}

	// An even map is left alone.
	flat := Traffic{Slots: make([]float64, m.Slots())}
	for s := range flat.Slots {
		flat.Slots[s] = 1
	}
	r, err := m.BalanceByTraffic(flat)
	if err != nil {
		t.Fatal(err)
	}
	if r.MovedSlots != 0 {
		t.Fatalf("even traffic: %d slots moved (%s)", r.MovedSlots, r.Op)
	}
	if _, err := m.BalanceByTraffic(Traffic{Slots: make([]float64, m.Slots())}); err == nil {
		t.Error("no traffic: balanced anyway")
	}
}
