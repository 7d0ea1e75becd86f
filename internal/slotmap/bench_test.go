package slotmap

import (
	"fmt"
	"math/rand/v2"
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

func BenchmarkDecode(b *testing.B) {
	enc, err := benchMap(b).Encode()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}
