package intake

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/slotmap"
)

func testMap(t *testing.T) *slotmap.Map {
	t.Helper()
	m, err := slotmap.New(64, map[string]int{"nice": 80})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2", "c3"} {
		p, err := m.AddCell(slotmap.Cell{ID: id, Weight: 1, Intake: "http://127.0.0.1:1", Admin: "http://127.0.0.1:2"})
		if err != nil {
			t.Fatal(err)
		}
		m = p.After
	}
	return m
}

func TestMovesRemembersThePreviousOwnerForAWhile(t *testing.T) {
	m := testMap(t)
	p, err := m.Drain("c2")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	mv, err := NewMoves(MovesConfig{Cell: "c1"}, MovesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mv.Observe(m, now)
	mv.Observe(p.After, now)
	gained := 0
	for s := 0; s < m.Slots(); s++ {
		prev, ok := mv.Previous("", s, now.Add(time.Minute))
		switch {
		case m.Owner(s) == "c2" && p.After.Owner(s) == "c1":
			gained++
			if !ok || prev != "c2" {
				t.Fatalf("slot %d moved c2 → c1: Previous = %q, %v", s, prev, ok)
			}
		case ok:
			t.Fatalf("slot %d (owner %s → %s) reported as moved from %s", s, m.Owner(s), p.After.Owner(s), prev)
		}
	}
	if gained == 0 {
		t.Fatal("the drain gave c1 no slots: test map too small")
	}
	for s := 0; s < m.Slots(); s++ {
		if _, ok := mv.Previous("", s, now.Add(api.MoveWindow+time.Second)); ok {
			t.Fatalf("slot %d still remembered after the window", s)
		}
	}
	// An older map arriving late changes nothing.
	mv.Observe(m, now)
	if mv.prev.Version() != p.After.Version() {
		t.Fatal("an older map replaced the newer one")
	}
}

// With a file, the moves survive a restart (the first map observed after
// it records nothing by itself), within api.MoveWindow; a broken file is an
// error, a missing one an empty log.
func TestMovesSurviveARestart(t *testing.T) {
	m := testMap(t)
	p, err := m.Drain("c2")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "moves.json")
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	mv, err := NewMoves(MovesConfig{Cell: "c1", Path: path}, MovesOptions{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	mv.Observe(m, now)
	mv.Observe(p.After, now)
	if err := mv.Err(); err != nil {
		t.Fatal(err)
	}
	moved := -1
	for s := 0; s < m.Slots(); s++ {
		if m.Owner(s) == "c2" && p.After.Owner(s) == "c1" {
			moved = s
			break
		}
	}
	if moved < 0 {
		t.Fatal("the drain gave c1 no slots")
	}
	// The restart: a new log from the file, fed the current map first.
	later := now.Add(5 * time.Minute)
	again, err := NewMoves(MovesConfig{Cell: "c1", Path: path}, MovesOptions{Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	again.Observe(p.After, later)
	if prev, ok := again.Previous("", moved, later); !ok || prev != "c2" {
		t.Fatalf("after a restart, slot %d: Previous = %q, %v, want c2", moved, prev, ok)
	}
	// Past the window the file's moves are not read back.
	gone, err := NewMoves(MovesConfig{Cell: "c1", Path: path}, MovesOptions{Now: func() time.Time { return now.Add(api.MoveWindow + time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := gone.Previous("", moved, now.Add(api.MoveWindow+time.Second)); ok {
		t.Fatal("a move older than the window was read back")
	}
	if mv, err := NewMoves(MovesConfig{Cell: "c1", Path: filepath.Join(t.TempDir(), "none.json")}, MovesOptions{}); err != nil || len(mv.from) != 0 {
		t.Fatalf("missing file: %v, %d moves", err, len(mv.from))
	}
	if err := os.WriteFile(path, []byte("{broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMoves(MovesConfig{Cell: "c1", Path: path}, MovesOptions{}); err == nil {
		t.Fatal("a broken file was accepted")
	}
}

// TestMovesRemembersUsersMovedByAnOverride: a user pinned to this cell, or
// unpinned back to it, came from the cell it was routed to before; that
// survives a restart, and other users of its slot did not move.
func TestMovesRemembersUsersMovedByAnOverride(t *testing.T) {
	m := testMap(t)
	var user string
	for i := 0; ; i++ {
		if u := "u-" + strconv.Itoa(i); m.Lookup(u).Cell == "c2" {
			user = u
			break
		}
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "moves.json")
	c1, err := NewMoves(MovesConfig{Cell: "c1", Path: path}, MovesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := NewMoves(MovesConfig{Cell: "c2"}, MovesOptions{})
	pin, err := m.SetOverride(user, "c1")
	if err != nil {
		t.Fatal(err)
	}
	for _, mv := range []*Moves{c1, c2} {
		mv.Observe(m, now)
		mv.Observe(pin.After, now)
	}
	slot := m.SlotOf(user)
	if prev, ok := c1.Previous(user, slot, now.Add(time.Minute)); !ok || prev != "c2" {
		t.Fatalf("c1: %s pinned from c2: Previous = %q, %v", user, prev, ok)
	}
	if prev, ok := c1.Previous("someone-else", slot, now.Add(time.Minute)); ok {
		t.Fatalf("c1: another user of slot %d reported as moved from %s", slot, prev)
	}
	again, err := NewMoves(MovesConfig{Cell: "c1", Path: path}, MovesOptions{Now: func() time.Time { return now.Add(time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	if prev, ok := again.Previous(user, slot, now.Add(time.Minute)); !ok || prev != "c2" {
		t.Fatalf("c1 after a restart: Previous = %q, %v", prev, ok)
	}
	unpin, err := pin.After.ClearOverride(user)
	if err != nil {
		t.Fatal(err)
	}
	c2.Observe(unpin.After, now.Add(2*time.Minute))
	if prev, ok := c2.Previous(user, slot, now.Add(3*time.Minute)); !ok || prev != "c1" {
		t.Fatalf("c2: %s unpinned from c1: Previous = %q, %v", user, prev, ok)
	}
}
