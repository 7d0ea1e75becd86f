package devstack

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// readyAfter serves /readyz: 503 for the first n probes, then 200.
func readyAfter(t *testing.T, n int64) string {
	t.Helper()
	var probes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if probes.Add(1) <= n {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/readyz"
}

func TestWaitReady(t *testing.T) {
	ctx := context.Background()
	hc := &http.Client{}
	t.Cleanup(hc.CloseIdleConnections)

	t.Run("ready", func(t *testing.T) {
		p, q := sleeper(t, "a"), sleeper(t, "b")
		p.Ready, q.Ready = readyAfter(t, 3), readyAfter(t, 0)
		a, b := start(t, p), start(t, q)
		if err := WaitReady(ctx, hc, 10*time.Second, a, b); err != nil {
			t.Fatalf("WaitReady = %v", err)
		}
	})
	t.Run("exits while starting", func(t *testing.T) {
		p := shell(t, "crash", "echo cannot listen; exit 2")
		p.Ready = readyAfter(t, 1<<40)
		c := start(t, p)
		err := WaitReady(ctx, hc, 10*time.Second, c)
		if err == nil || !strings.Contains(err.Error(), "crash exited while starting (exit status 2)") || !strings.Contains(err.Error(), "cannot listen") {
			t.Fatalf("WaitReady = %v, want the exit and the log's last lines", err)
		}
	})
	t.Run("attached process gone", func(t *testing.T) {
		p := shell(t, "old", "exit 0")
		c := start(t, p)
		<-c.Exited()
		p.PID, p.Ready = c.PID, readyAfter(t, 1<<40)
		err := WaitReady(ctx, hc, 10*time.Second, Attach(p))
		if err == nil || !strings.Contains(err.Error(), "old exited while starting (no longer running)") {
			t.Fatalf("WaitReady = %v, want no longer running", err)
		}
	})
	t.Run("not ready in time", func(t *testing.T) {
		p := sleeper(t, "slow")
		p.Ready = readyAfter(t, 1<<40)
		c := start(t, p)
		err := WaitReady(ctx, hc, 200*time.Millisecond, c)
		if err == nil || !strings.Contains(err.Error(), "not ready within 200ms: slow") {
			t.Fatalf("WaitReady = %v, want not ready within 200ms", err)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		p := sleeper(t, "slow")
		p.Ready = readyAfter(t, 1<<40)
		c := start(t, p)
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if err := WaitReady(cctx, hc, time.Minute, c); err == nil || !strings.Contains(err.Error(), "interrupted") {
			t.Fatalf("WaitReady = %v, want interrupted", err)
		}
	})
}

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b | c"},
		{"a\n", 5, "a"},
		{"", 3, ""},
	} {
		if got := Tail(tc.in, tc.n); got != tc.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	if got := LogTail("/nonexistent/log", 3); got != "(no log)" {
		t.Errorf("LogTail(missing) = %q", got)
	}
}
