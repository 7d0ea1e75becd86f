package control_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/control"
)

// TestDeadlineHeld: --timeout's clock stops while held (a data move's
// steps), runs on after, and ends with context.DeadlineExceeded; the
// parent's end ends it too.
func TestDeadlineHeld(t *testing.T) {
	ctx, stop := control.WithDeadline(context.Background(), 200*time.Millisecond)
	defer stop()
	resume := ctx.Hold()
	// Held through a context made from it, as a change's steps hold it.
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	inner := control.Hold(derived) // holds nest
	time.Sleep(400 * time.Millisecond)
	inner()
	if err := ctx.Err(); err != nil {
		t.Fatalf("held past its timeout: %v", err)
	}
	resume()
	resume() // once
	start := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not ended 5s after it was let go")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("ended with %v, want deadline exceeded", ctx.Err())
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("ended %v after it was let go, want about 200ms", d)
	}

	parent, cancel := context.WithCancel(context.Background())
	ctx, stop = control.WithDeadline(parent, time.Hour)
	defer stop()
	defer ctx.Hold()()
	control.Hold(context.Background())() // no Deadline: nothing held
	cancel()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after the parent's end: %v", ctx.Err())
	}
}
