package registry

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cellkit/cellkit/internal/consultest"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

var consulTestOptions = ConsulConfig{
	PollInterval: 20 * time.Millisecond,
	WatchWait:    2 * time.Second,
	MaxBackoff:   500 * time.Millisecond,
	LockTTL:      10 * time.Second,
}

// consulTestConfig is consulTestOptions for the registry at addr/prefix.
func consulTestConfig(addr, prefix string) ConsulConfig {
	c := consulTestOptions
	c.Addr, c.Prefix = addr, prefix
	return c
}

func TestConsulContract(t *testing.T) {
	agent := consultest.Start(t)
	prefix := consulPrefix()
	runContract(t, harness{
		open:  func(t *testing.T) Registry { return openConsul(t, agent, prefix) },
		stop:  func(t *testing.T) { agent.Stop(t) },
		start: func(t *testing.T) { agent.Restart(t) },
		holdAndDie: func(t *testing.T, r Registry) func() {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := r.Lock(ctx, "dying holder")
			if err != nil {
				t.Fatalf("Lock(dying holder): %v", err)
			}
			t.Cleanup(func() { _ = l.Unlock(context.Background()) })
			session := l.(*consulLock).Session()
			return func() {
				// What Consul sees when a holder dies: its session ends.
				if _, err := agent.Client(t).Session().Destroy(session, nil); err != nil {
					t.Errorf("destroy session of dying holder: %v", err)
				}
			}
		},
	})
}

func TestConsulDescribe(t *testing.T) {
	c, err := NewConsul(ConsulConfig{Addr: "127.0.0.1:8500", Prefix: "cellkit"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Describe(), "consul://127.0.0.1:8500/cellkit"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
}

// A value at PREFIX/map that is not a valid map is never taken for one.
func TestConsulCorruptMap(t *testing.T) {
	agent := consultest.Start(t)
	prefix := consulPrefix()
	r := openConsul(t, agent, prefix)
	ctx := testkit.Context(t, time.Minute)
	key := prefix + "/map"
	consulPut(t, agent, key, []byte(`{"version": 7, "cells": "nope"`))

	if m, err := r.Load(ctx); err == nil || errors.Is(err, ErrNoMap) || !strings.Contains(err.Error(), key) {
		t.Errorf("Load() = %v, %v; want an error naming %s", m, err, key)
	}
	maps := consulMaps(t, 2)
	if err := r.CompareAndSwap(ctx, 0, maps[0]); err == nil {
		t.Errorf("CompareAndSwap(0, v1) over a corrupt value succeeded, want an error")
	}

	events := watchConsul(t, r, 0)
	ev := consulNextEvent(t, events, 10*time.Second, func(ev Event) bool { return ev.Err != nil || ev.Map != nil })
	if ev.Map != nil || !strings.Contains(ev.Err.Error(), key) {
		t.Fatalf("Watch event = {Map: %v, Err: %v}, want Err naming %s", ev.Map, ev.Err, key)
	}

	// Repaired by hand: the watch picks up the good map.
	good, err := maps[1].Encode()
	if err != nil {
		t.Fatal(err)
	}
	consulPut(t, agent, key, good)
	ev = consulNextEvent(t, events, 10*time.Second, func(ev Event) bool { return ev.Map != nil })
	if ev.Map.Version() != 2 {
		t.Errorf("Watch delivered version %d, want 2", ev.Map.Version())
	}
	if m, err := r.Load(ctx); err != nil || m.Version() != 2 {
		t.Errorf("Load() = %v, %v; want version 2", m, err)
	}
}

// A restarted dev agent starts its Raft index again near 1, with a new copy of
// the old versions. The watch catches up at once (not after a blocking query
// for an index the new agent has not reached times out), and never delivers
// an old version again. TestConsulNextIndex covers the index rules.
func TestConsulWatchAfterAgentRestart(t *testing.T) {
	agent := consultest.Start(t)
	prefix := consulPrefix()
	r := openConsul(t, agent, prefix)
	ctx := testkit.Context(t, time.Minute)
	maps := consulMaps(t, 4)

	// Push the index well above where a fresh agent starts.
	for i := range 50 {
		consulPut(t, agent, fmt.Sprintf("%s/filler/%d", prefix, i), []byte("x"))
	}
	consulCASAll(t, ctx, r, nil, maps[:3])
	_, meta, err := agent.Client(t).KV().Get(prefix+"/map", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := meta.LastIndex

	events := watchConsul(t, r, 0)
	if ev := consulNextEvent(t, events, 10*time.Second, func(ev Event) bool { return ev.Map != nil }); ev.Map.Version() != 3 {
		t.Fatalf("Watch delivered version %d first, want 3", ev.Map.Version())
	}

	agent.Stop(t)
	consulNextEvent(t, events, 10*time.Second, func(ev Event) bool { return ev.Err != nil })
	agent.Restart(t)

	// The restarted agent is empty: write versions 1..4 again.
	consulCASAll(t, ctx, r, nil, maps)
	_, meta, err = agent.Client(t).KV().Get(prefix+"/map", nil)
	if err != nil {
		t.Fatal(err)
	}
	if meta.LastIndex >= before {
		t.Fatalf("index after restart = %d, not below %d: the test proves nothing", meta.LastIndex, before)
	}
	t.Logf("index went from %d to %d", before, meta.LastIndex)

	start := time.Now()
	ev := consulNextEvent(t, events, 5*consulTestOptions.WatchWait, func(ev Event) bool { return ev.Map != nil })
	if ev.Map.Version() != 4 {
		t.Fatalf("Watch delivered version %d after restart, want 4 (never an old one)", ev.Map.Version())
	}
	t.Logf("watch resumed %v after the write", time.Since(start).Round(time.Millisecond))
}

func TestConsulNextIndex(t *testing.T) {
	tests := []struct {
		name      string
		prev, got uint64
		want      uint64
	}{
		{"first call", 0, 17, 17},
		{"unchanged", 17, 17, 17},
		{"moved on", 17, 40, 40},
		{"went backwards: start over", 40, 12, 0},
		{"zero from the agent", 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextIndex(tt.prev, tt.got); got != tt.want {
				t.Errorf("nextIndex(%d, %d) = %d, want %d", tt.prev, tt.got, got, tt.want)
			}
		})
	}
}

// CONSUL_HTTP_TOKEN reaches Consul: with ACLs on, the right token works and a
// wrong one fails loudly (not as an empty registry).
func TestConsulToken(t *testing.T) {
	const token = "5e0c1a1e-0000-4000-8000-00000000c311"
	agent := consultest.Start(t, consultest.WithACL(token))
	prefix := consulPrefix()
	ctx := testkit.Context(t, time.Minute)

	t.Setenv("CONSUL_HTTP_TOKEN", token)
	good := openConsul(t, agent, prefix)
	if err := good.CompareAndSwap(ctx, 0, consulMaps(t, 1)[0]); err != nil {
		t.Fatalf("CompareAndSwap with token: %v", err)
	}

	t.Setenv("CONSUL_HTTP_TOKEN", "00000000-0000-4000-8000-000000000bad")
	bad := openConsul(t, agent, prefix)
	if m, err := bad.Load(ctx); err == nil || errors.Is(err, ErrNoMap) {
		t.Errorf("Load with a wrong token = %v, %v; want an ACL error", m, err)
	}

	// Config.Token wins over the environment's.
	reg, err := Open(Config{URL: "consul://" + agent.Addr() + "/" + prefix, Token: token}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if m, err := reg.Load(ctx); err != nil || m.Version() != 1 {
		t.Errorf("Load with Config.Token = %v, %v; want version 1", m, err)
	}
}

// A holder whose session ends loses the lock (Lost closes), and the next
// writer gets it soon after Consul's lock delay.
func TestConsulLockSessionEnds(t *testing.T) {
	agent := consultest.Start(t)
	prefix := consulPrefix()
	ctx := testkit.Context(t, time.Minute)
	a, b := openConsul(t, agent, prefix), openConsul(t, agent, prefix)

	la, err := a.Lock(ctx, "first")
	if err != nil {
		t.Fatalf("Lock(first): %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, err = b.Lock(short, "second")
	cancel()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Lock with a 300ms deadline returned after %v", d)
	}
	var locked *LockedError
	if !errors.As(err, &locked) || locked.Holder.Holder != "first" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock(second) while held = %v, want a LockedError naming first", err)
	}

	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if _, err := b.Lock(done, "second"); !errors.As(err, &locked) || locked.Holder.Holder != "first" {
		t.Fatalf("Lock(second) with a cancelled context = %v, want a LockedError naming first", err)
	}

	if _, err := agent.Client(t).Session().Destroy(la.(*consulLock).Session(), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() not closed 5s after the session was destroyed")
	}
	start = time.Now()
	lb, err := b.Lock(ctx, "second")
	if err != nil {
		t.Fatalf("Lock(second) after first died: %v", err)
	}
	t.Logf("second writer got the lock %v after the first one's session ended", time.Since(start).Round(time.Millisecond))

	// A clean Unlock has no lock delay: the next writer gets it at once.
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("second Unlock: %v", err)
	}
	start = time.Now()
	lc, err := a.Lock(ctx, "third")
	if err != nil {
		t.Fatalf("Lock(third): %v", err)
	}
	if d := time.Since(start); d > lockDelay {
		t.Errorf("Lock after a clean Unlock took %v, want under the lock delay %v", d, lockDelay)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Errorf("Unlock of a lost lock: %v", err)
	}
	pair, _, err := agent.Client(t).KV().Get(prefix+"/lock", nil)
	if err != nil || pair == nil || pair.Session != lc.(*consulLock).Session() {
		t.Errorf("lock key after the lost lock's Unlock = %+v, %v; want it still held by third", pair, err)
	}
	select {
	case <-lc.Lost():
		t.Errorf("Unlock of a lost lock took the lock from its new holder")
	default:
	}
	if err := lc.Unlock(ctx); err != nil {
		t.Errorf("Unlock(third): %v", err)
	}
	sessions, _, err := agent.Client(t).Session().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 0 {
		t.Errorf("%d sessions left after every Unlock, want 0", len(sessions))
	}
}

func openConsul(t *testing.T, agent *consultest.Agent, prefix string) *Consul {
	t.Helper()
	c, err := NewConsul(consulTestConfig(agent.Addr(), prefix), Options{})
	if err != nil {
		t.Fatalf("NewConsul: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// consulPrefix is a fresh key prefix, so tests never see each other's keys.
func consulPrefix() string { return "cellkit-test-" + strings.ToLower(rand.Text()) }

func consulPut(t *testing.T, agent *consultest.Agent, key string, value []byte) {
	t.Helper()
	if _, err := agent.Client(t).KV().Put(&api.KVPair{Key: key, Value: value}, nil); err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}
}

// consulMaps returns valid maps of versions 1..n.
func consulMaps(t *testing.T, n int) []*slotmap.Map {
	t.Helper()
	m, err := slotmap.New(0, map[string]int{"nice": 80})
	if err != nil {
		t.Fatal(err)
	}
	maps := []*slotmap.Map{m}
	for i := 1; i < n; i++ {
		p, err := m.SetAgency("nice", 80+i)
		if err != nil {
			t.Fatal(err)
		}
		m = p.After
		maps = append(maps, m)
	}
	return maps
}

// consulCASAll writes maps in order, each over the one before (the first over none).
func consulCASAll(t *testing.T, ctx context.Context, r Registry, prev *slotmap.Map, maps []*slotmap.Map) {
	t.Helper()
	for _, m := range maps {
		var old int64
		if prev != nil {
			old = prev.Version()
		}
		if err := r.CompareAndSwap(ctx, old, m); err != nil {
			t.Fatalf("CompareAndSwap(%d, v%d): %v", old, m.Version(), err)
		}
		prev = m
	}
}

// watchConsul runs r.Watch until the test ends and checks that every
// delivered version is higher than the one before.
func watchConsul(t *testing.T, r Registry, after int64) <-chan Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan Event, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := after
		r.Watch(ctx, after, func(ev Event) {
			if ev.Map != nil {
				if ev.Map.Version() <= last {
					t.Errorf("Watch delivered version %d after %d", ev.Map.Version(), last)
				}
				last = ev.Map.Version()
			}
			select {
			case events <- ev:
			case <-ctx.Done():
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return 5s after its context was cancelled")
		}
	})
	return events
}

// consulNextEvent returns the first event that matches, failing after timeout.
func consulNextEvent(t *testing.T, events <-chan Event, timeout time.Duration, match func(Event) bool) Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-events:
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no matching watch event within %v", timeout)
		}
	}
}

// Watch, Lock and Unlock leave no goroutine behind once Close is called.
func TestConsulNoGoroutineLeak(t *testing.T) {
	agent := consultest.Start(t)
	prefix := consulPrefix()
	ctx := testkit.Context(t, time.Minute)
	before := runtime.NumGoroutine()

	r, err := NewConsul(consulTestConfig(agent.Addr(), prefix), Options{})
	if err != nil {
		t.Fatal(err)
	}
	consulCASAll(t, ctx, r, nil, consulMaps(t, 1))
	wctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		r.Watch(wctx, 0, func(Event) {})
	}()
	l, err := r.Lock(ctx, "holder")
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	if _, err := r.Lock(short, "waiter"); err == nil {
		t.Fatal("second Lock succeeded")
	}
	cancelShort()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-watched
	r.Close()

	gone := testkit.Poll(5*time.Second, func() bool {
		r.Close() // connections that were busy a moment ago may be idle now
		return runtime.NumGoroutine() <= before
	})
	if !gone {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}
