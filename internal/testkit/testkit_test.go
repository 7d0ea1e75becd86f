package testkit

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	RunAsProgram(echoProgram, echoMain)
	VerifyTestMain(m)
}

// fatalTB records the first Fatalf and ends the goroutine that called it,
// as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a fatalTB on its own goroutine and returns what it
// failed with ("" if it did not).
func run(t *testing.T, f func(tb testing.TB)) string {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); f(tb) }()
	<-done
	return tb.msg
}

func TestWaitFor(t *testing.T) {
	start := time.Now()
	n := 0
	if msg := run(t, func(tb testing.TB) {
		WaitFor(tb, 5*time.Second, "the third check", func() bool { n++; return n == 3 })
	}); msg != "" {
		t.Fatalf("WaitFor failed: %s", msg)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a condition true at the third check took %v", took)
	}

	start = time.Now()
	msg := run(t, func(tb testing.TB) {
		WaitFor(tb, 50*time.Millisecond, "a miracle", func() bool { return false })
	})
	if want := "timed out after 50ms waiting for a miracle"; msg != want {
		t.Errorf("WaitFor on a false condition failed with %q, want %q", msg, want)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("gave up after %v, before the deadline", took)
	}
}

func TestPollChecksOnceMoreAfterTheDeadline(t *testing.T) {
	deadline := time.Now().Add(20 * time.Millisecond)
	if !Poll(20*time.Millisecond, func() bool { return time.Now().After(deadline) }) {
		t.Error("Poll = false for a condition that holds at the deadline")
	}
	if Poll(0, func() bool { return false }) {
		t.Error("Poll = true for a false condition")
	}
}

func TestTimingPassesOnceAnAttemptMeetsItsBounds(t *testing.T) {
	n := 0
	if out := run(t, func(tb testing.TB) {
		Timing(tb, 3, func() error {
			n++
			if n < 2 {
				return errors.New("stalled")
			}
			return nil
		})
	}); out != "" || n != 2 {
		t.Errorf("Timing after one miss: failed %q, %d attempts", out, n)
	}
	n = 0
	if out := run(t, func(tb testing.TB) {
		Timing(tb, 3, func() error { n++; return fmt.Errorf("miss %d", n) })
	}); !strings.Contains(out, "miss 3 (missed in each of 3 attempts)") || n != 3 {
		t.Errorf("Timing missing every time: failed %q, %d attempts", out, n)
	}
}

func TestClock(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := NewClock(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v, want %v", got, start)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(400*time.Second); !got.Equal(want) {
		t.Fatalf("after 400 concurrent Advance(1s): %v, want %v", got, want)
	}
	c.Set(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("after Set: %v, want %v", got, start)
	}
}

func TestConcurrentWritesAllLand(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("x\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "x\n"); n != 800 {
		t.Fatalf("%d lines, want 800", n)
	}
}

func TestBufferLogger(t *testing.T) {
	var b Buffer
	log := b.Logger(slog.LevelInfo)
	log.Debug("hidden")
	log.Warn("shown", "id", "c1-7")
	if got := b.String(); strings.Contains(got, "hidden") || !strings.Contains(got, "level=WARN msg=shown id=c1-7") {
		t.Fatalf("logged %q, want the warning only, as text", got)
	}
}

func TestListenAndFreeAddr(t *testing.T) {
	ln := Listen(t)
	if !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
		t.Errorf("Listen on %v, want loopback", ln.Addr())
	}
	addr := FreeAddr(t)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("something listens on FreeAddr() = %s", addr)
	}
}

func TestDo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/problem" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"type":"x","title":"Bad Request","status":400,"field":"amount"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"method":%q,"type":%q,"key":%q}`, r.Method, r.Header.Get("Content-Type"), r.Header.Get("X-Key"))
	}))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	var got struct{ Method, Type, Key string }
	r := Do(t, srv.Client(), "POST", srv.URL, map[string]int{"n": 1}, map[string]string{"X-Key": "k"})
	r.JSON(t, &got)
	if r.Status != http.StatusOK || got.Method != "POST" || got.Type != "application/json" || got.Key != "k" {
		t.Errorf("Do = %d %+v, want 200 from a POST with a JSON body and the header", r.Status, got)
	}
	if r := DoJSON(t, srv.Client(), "PUT", srv.URL, `raw`, &got); r.Status != http.StatusOK || got.Method != "PUT" || got.Type != "" {
		t.Errorf("DoJSON = %d %+v, want 200 from a PUT with no content type", r.Status, got)
	}
	p := Do(t, srv.Client(), "GET", srv.URL+"/problem", nil, nil).Problem(t)
	if p.Status != http.StatusBadRequest || p.Field != "amount" {
		t.Errorf("Problem() = %+v", p)
	}
	if _, err := Send(nil, "GET", "http://"+FreeAddr(t), nil, nil); err == nil {
		t.Error("Send to a closed port succeeded")
	}
}

func TestLeakOptionsKeepsTheBaseAndAddsExtra(t *testing.T) {
	base := LeakOptions()
	if got := LeakOptions(goleak.IgnoreCurrent()); len(got) != len(base)+1 {
		t.Fatalf("%d options with one extra, want %d", len(got), len(base)+1)
	}
}
