package slotmap

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// benchUsers returns n user ids of 36 bytes (the length of a UUID string).
func benchUsers(n int) []string {
	rng := rand.New(rand.NewPCG(9, 9))
	users := make([]string, n)
	for i := range users {
		users[i] = fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", rng.Uint32(), rng.Uint32()&0xffff, rng.Uint32()&0xffff, rng.Uint32()&0xffff, rng.Uint64()&0xffffffffffff)
	}
	return users
}

// benchMap is the map of the benchmarks: 16384 slots, 64 cells of mixed
// weights, 1000 overrides.
func benchMap(b *testing.B) *Map {
	rng := rand.New(rand.NewPCG(8, 8))
	m := buildMap(b, randomWeights(rng, 64))
	m = m.clone()
	m.overrides = map[string]string{}
	for i, u := range benchUsers(1000) {
		m.overrides["pin-"+u[5:]] = fmt.Sprintf("c%02d", i%64)
	}
	m.finish()
	if err := m.Validate(); err != nil {
		b.Fatal(err)
	}
	return m
}

var sinkHash uint64
var sinkRoute Route

func BenchmarkHash(b *testing.B) {
	users := benchUsers(1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sinkHash = HashUser(users[i&1023])
	}
}

func BenchmarkLookup(b *testing.B) {
	m := benchMap(b)
	users := benchUsers(1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sinkRoute = m.Lookup(users[i&1023])
	}
}

// BenchmarkLookupOverride looks up only pinned users (the slow path).
func BenchmarkLookupOverride(b *testing.B) {
	m := benchMap(b)
	var pinned []string
	for u := range m.overrides {
		pinned = append(pinned, u)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sinkRoute = m.Lookup(pinned[i%len(pinned)])
	}
}

func BenchmarkPlanDrain(b *testing.B) {
	m := benchMap(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Drain(fmt.Sprintf("c%02d", i%64)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlanAddCell(b *testing.B) {
	m := benchMap(b)
	c := testCell("new", 5)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.AddCell(c); err != nil {
			b.Fatal(err)
		}
	}
}

// codecBenchSizes are the cell counts of the codec benchmarks.
var codecBenchSizes = []int{64, 256, 1000}

var codecBenchMaps sync.Map // cell count → *Map

// codecBenchMap is the map of the codec benchmarks: 16384 slots at their
// rendezvous target over n cells of weights 1–10 (so nearly every table run
// is one slot long), two agencies, 1000 overrides. Each cell has intake and
// admin URLs like http://10.0.3.232:8080 and a quota for both agencies; one
// cell in eight runs 3 instances. It is built once per size.
func codecBenchMap(tb testing.TB, n int) *Map {
	tb.Helper()
	if m, ok := codecBenchMaps.Load(n); ok {
		return m.(*Map)
	}
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	m, err := New(DefaultSlots, map[string]int{"kcb": 4000, "nice": 8000})
	if err != nil {
		tb.Fatal(err)
	}
	host := func(k int) string { return fmt.Sprintf("10.%d.%d.%d", k>>16&255, k>>8&255, k&255) }
	for i := 0; i < n; i++ {
		c := Cell{ID: fmt.Sprintf("c%04d", i), State: Active, Weight: 1 + rng.IntN(10)}
		c.Intake, c.Admin = "http://"+host(i)+":8080", "http://"+host(i)+":9090"
		if i%8 == 0 {
			for j := 1; j <= 3; j++ {
				h := host(1<<16 + 4*i + j)
				c.Instances = append(c.Instances, Instance{ID: fmt.Sprintf("i%d", j), Intake: "http://" + h + ":8080", Admin: "http://" + h + ":9090"})
			}
			c.followInstances()
		}
		m.cells = append(m.cells, c)
	}
	m.finish()
	m.claimSlots(0)
	if err := m.recomputeQuotas(); err != nil {
		tb.Fatal(err)
	}
	m.overrides = map[string]string{}
	for i, u := range benchUsers(1000) {
		m.overrides["pin-"+u[5:]] = fmt.Sprintf("c%04d", i%n)
	}
	m.finish()
	if err := m.Validate(); err != nil {
		tb.Fatal(err)
	}
	codecBenchMaps.Store(n, m)
	return m
}

// BenchmarkEncode encodes the map; the "bytes" metric is the document's size.
func BenchmarkEncode(b *testing.B) {
	for _, n := range codecBenchSizes {
		b.Run(fmt.Sprintf("cells=%d", n), func(b *testing.B) {
			m := codecBenchMap(b, n)
			var data []byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var err error
				if data, err = m.Encode(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(data)), "bytes")
		})
	}
}

// BenchmarkDecode decodes the canonical document, as every router and cell
// does on every map change.
func BenchmarkDecode(b *testing.B) {
	for _, n := range codecBenchSizes {
		b.Run(fmt.Sprintf("cells=%d", n), func(b *testing.B) {
			data, err := codecBenchMap(b, n).Encode()
			if err != nil {
				b.Fatal(err)
			}
			benchDecode(b, data)
		})
	}
}

func benchDecode(b *testing.B, data []byte) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(data)), "bytes")
}

// BenchmarkDecodeFormat1 decodes the same maps written in format 1 (the
// table as runs), as a registry holds them until the first write after an
// upgrade.
func BenchmarkDecodeFormat1(b *testing.B) {
	for _, n := range codecBenchSizes {
		b.Run(fmt.Sprintf("cells=%d", n), func(b *testing.B) {
			benchDecode(b, encodeFormat1(b, codecBenchMap(b, n)))
		})
	}
}
