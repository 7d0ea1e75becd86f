package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestJittered(t *testing.T) {
	tests := []struct {
		n      int
		lo, hi time.Duration
	}{
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{4, 400 * time.Millisecond, 800 * time.Millisecond},
		{10, 500 * time.Millisecond, time.Second}, // capped
		{1000, 500 * time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		for i := 0; i < 200; i++ {
			if d := Jittered(100*time.Millisecond, time.Second, tt.n); d < tt.lo || d > tt.hi {
				t.Fatalf("Jittered(100ms, 1s, %d) = %v, want in [%v, %v]", tt.n, d, tt.lo, tt.hi)
			}
		}
	}
}

func TestSleep(t *testing.T) {
	start := time.Now()
	if err := Sleep(context.Background(), 20*time.Millisecond); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Errorf("Sleep 20ms: %v after %v", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	start = time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Minute {
		t.Errorf("Sleep cut by its context: %v after %v", err, time.Since(start))
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep 0 on an ended context: %v", err)
	}
}
