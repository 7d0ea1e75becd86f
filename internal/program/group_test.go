package program

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/oklog/run"
)

// The stop runs in the order of the adds; followers stop together, a
// follower that ends early without an error does not end the group, and
// one that fails does.
func TestGroupStopsInTheOrderAdded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var g run.Group
	var order []string
	g.Add(func() error { <-ctx.Done(); return nil }, func(error) { cancel(); order = append(order, "end") })
	follow := Followers(context.Background(), &g)
	early := make(chan struct{})
	follow(func(context.Context) error { close(early); return nil })
	followerStopped := make(chan struct{})
	follow(func(ctx context.Context) error { <-ctx.Done(); close(followerStopped); return nil })
	OnStop(&g, func() { order = append(order, "notice") })
	served, stopServing := make(chan struct{}), make(chan struct{})
	g.Add(func() error { close(served); <-stopServing; return nil }, func(error) {
		order = append(order, "drain")
		close(stopServing)
	})
	done := make(chan error, 1)
	go func() { done <- g.Run() }()
	<-early
	<-served
	select {
	case err := <-done:
		t.Fatalf("the group ended when a follower returned early: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := []string{"end", "notice", "drain"}; !slices.Equal(order, want) {
		t.Fatalf("stops ran %v, want %v", order, want)
	}
	select {
	case <-followerStopped:
	default:
		t.Fatal("Run returned before the follower stopped")
	}

	var g2 run.Group
	boom := errors.New("boom")
	Followers(context.Background(), &g2)(func(context.Context) error { return boom })
	OnStop(&g2, func() {})
	if err := g2.Run(); !errors.Is(err, boom) {
		t.Fatalf("a failing follower ended the group with %v, want %v", err, boom)
	}
}
