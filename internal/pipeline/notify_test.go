package pipeline

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/testkit"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// receiver is a callback server on 127.0.0.1 answering the statuses in
// turn (the last repeats; none: 200).
type receiver struct {
	*httptest.Server
	hits   atomic.Int64
	bodies chan inquiry.View
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{bodies: make(chan inquiry.View, 16)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := int(r.hits.Add(1))
		var v inquiry.View
		if json.NewDecoder(req.Body).Decode(&v) == nil {
			r.bodies <- v
		}
		if len(statuses) > 0 {
			w.WriteHeader(statuses[min(n, len(statuses))-1])
		}
	}))
	t.Cleanup(r.Close)
	return r
}

type testNotifier struct {
	*notifierQueue
	m    *metrics
	logs *testkit.Buffer
	stop func() // stops the workers and waits for them
}

// startNotifier builds a notifier the way New does, with workers workers
// (0: none started), and stops it at cleanup.
func startNotifier(t *testing.T, cfg notifierConfig, workers int) *testNotifier {
	t.Helper()
	m := newMetrics(nil, nil)
	logs := &testkit.Buffer{}
	log := logs.Logger(slog.LevelInfo)
	n := &testNotifier{notifierQueue: newNotifier(m, log, cfg), m: m, logs: logs}
	ctx, cancel := context.WithCancel(context.Background())
	if workers > 0 {
		n.run(ctx, workers)
	}
	var once sync.Once
	n.stop = func() { once.Do(func() { cancel(); n.wait() }) }
	t.Cleanup(n.stop)
	return n
}

func (n *testNotifier) count(outcome string) int {
	return int(testutil.ToFloat64(n.m.callbacks.WithLabelValues(outcome)))
}

func (n *testNotifier) counts() map[string]int {
	out := map[string]int{}
	for _, o := range []string{"ok", "retry", "error", "refused", "dropped"} {
		if c := n.count(o); c > 0 {
			out[o] = c
		}
	}
	return out
}

// settle waits until the callbacks have a final outcome and returns the
// counts, after a pause that would let a wrong retry (backoff ≤ 10ms) show.
func (n *testNotifier) settle(t *testing.T, final int) map[string]int {
	t.Helper()
	if !testkit.Poll(10*time.Second, func() bool { return n.count("ok")+n.count("error")+n.count("refused") >= final }) {
		t.Fatalf("callbacks not settled: %v", n.counts())
	}
	time.Sleep(100 * time.Millisecond)
	return n.counts()
}

func record(id, url string) inquiry.Record {
	return inquiry.Record{ID: id, Cell: "c1", UserID: "u-1", Product: "p", Amount: 1, Priority: inquiry.Normal,
		CallbackURL: url, Status: inquiry.Done, Result: &inquiry.Result{Limit: 1}}
}

func sameCounts(got, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func TestCallbackDelivered(t *testing.T) {
	r := newReceiver(t)
	n := startNotifier(t, notifierConfig{allow: loopback}, 4)
	n.enqueue(record("c1-a", r.URL+"/done"))
	n.enqueue(record("c1-none", "")) // no callback asked
	got := n.settle(t, 1)
	if !sameCounts(got, map[string]int{"ok": 1}) || r.hits.Load() != 1 {
		t.Fatalf("counts %v, %d requests; want one ok", got, r.hits.Load())
	}
	if v := <-r.bodies; v.ID != "c1-a" || v.Status != inquiry.Done || v.Result == nil {
		t.Fatalf("body %+v", v)
	}
}

func TestCallbackRetries(t *testing.T) {
	for _, tc := range []struct {
		name     string
		statuses []int
		attempts int
		hits     int64
		want     map[string]int
	}{
		{"503 then 200", []int{503, 503, 200}, 4, 3, map[string]int{"retry": 2, "ok": 1}},
		{"429 until the last attempt", []int{429}, 3, 3, map[string]int{"retry": 2, "error": 1}},
		{"400 is final", []int{400}, 4, 1, map[string]int{"error": 1}},
		{"404 is final", []int{404}, 4, 1, map[string]int{"error": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReceiver(t, tc.statuses...)
			n := startNotifier(t, notifierConfig{allow: loopback, attempts: tc.attempts, backoff: 10 * time.Millisecond}, 4)
			n.enqueue(record("c1-a", r.URL))
			if got := n.settle(t, 1); !sameCounts(got, tc.want) || r.hits.Load() != tc.hits {
				t.Fatalf("counts %v after %d requests, want %v after %d", got, r.hits.Load(), tc.want, tc.hits)
			}
		})
	}
}

func TestCallbackConnectionErrorRetried(t *testing.T) {
	r := newReceiver(t)
	url := r.URL
	r.Close() // nothing listens there any more
	n := startNotifier(t, notifierConfig{allow: loopback, attempts: 3, backoff: 10 * time.Millisecond}, 4)
	n.enqueue(record("c1-a", url))
	if got := n.settle(t, 1); !sameCounts(got, map[string]int{"retry": 2, "error": 1}) {
		t.Fatalf("counts %v", got)
	}
}

func TestCallbackRedirectNotFollowed(t *testing.T) {
	target := newReceiver(t)
	var hits atomic.Int64
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		hits.Add(1)
		http.Redirect(w, req, target.URL+"/elsewhere", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	n := startNotifier(t, notifierConfig{allow: loopback, backoff: 10 * time.Millisecond}, 4)
	n.enqueue(record("c1-a", redirect.URL))
	if got := n.settle(t, 1); !sameCounts(got, map[string]int{"error": 1}) || hits.Load() != 1 || target.hits.Load() != 0 {
		t.Fatalf("counts %v, %d requests to the redirecting server, %d to its target; want one error, 1, 0",
			got, hits.Load(), target.hits.Load())
	}
}

func TestCallbackLoopbackRefused(t *testing.T) {
	r := newReceiver(t)
	port := r.URL[strings.LastIndex(r.URL, ":")+1:]
	for _, url := range []string{
		r.URL + "/done?token=s3cret",
		"http://localhost:" + port + "/done", // checked after resolution
		"http://[::ffff:127.0.0.1]:" + port + "/done",
	} {
		t.Run(url, func(t *testing.T) {
			n := startNotifier(t, notifierConfig{backoff: 10 * time.Millisecond}, 4)
			n.enqueue(record("c1-refused", url))
			if got := n.settle(t, 1); !sameCounts(got, map[string]int{"refused": 1}) || r.hits.Load() != 0 {
				t.Fatalf("counts %v, %d requests; want one refused, none received", got, r.hits.Load())
			}
			logs := n.logs.String()
			if strings.Count(logs, "level=WARN") != 1 || !strings.Contains(logs, "id=c1-refused") || !strings.Contains(logs, "loopback") {
				t.Errorf("want one warning with the id and the reason, logged:\n%s", logs)
			}
			if strings.Contains(logs, "s3cret") || strings.Contains(logs, "/done") {
				t.Errorf("the URL was logged:\n%s", logs)
			}
		})
	}
	t.Run("allowed", func(t *testing.T) {
		n := startNotifier(t, notifierConfig{allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, 4)
		n.enqueue(record("c1-allowed", r.URL))
		if got := n.settle(t, 1); !sameCounts(got, map[string]int{"ok": 1}) || r.hits.Load() != 1 {
			t.Fatalf("counts %v, %d requests; want one ok", got, r.hits.Load())
		}
	})
}

func TestCallbackRefusal(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		allow string // a prefix, or ""
		want  string // the reason, "" allowed
	}{
		{"127.0.0.1", "", "loopback"},
		{"127.5.6.7", "", "loopback"},
		{"::1", "", "loopback"},
		{"::ffff:127.0.0.1", "", "loopback"},
		{"10.1.2.3", "", "private"},
		{"172.16.0.1", "", "private"},
		{"192.168.1.1", "", "private"},
		{"::ffff:10.1.2.3", "", "private"},
		{"fd00::1", "", "private"},
		{"fc00::1", "", "private"},
		{"169.254.169.254", "", "link-local"},
		{"::ffff:169.254.169.254", "", "link-local"},
		{"fe80::1", "", "link-local"},
		{"fe80::1%eth0", "", "link-local"},
		{"0.0.0.0", "", "unspecified"},
		{"0.1.2.3", "", "unspecified"},
		{"::", "", "unspecified"},
		{"224.0.0.1", "", "multicast"},
		{"ff02::1", "", "multicast"},
		{"100.64.0.1", "", "shared (CGNAT)"},
		{"100.127.255.254", "", "shared (CGNAT)"},
		{"255.255.255.255", "", "reserved"},
		{"64:ff9b::a01:203", "", "private"}, // NAT64 of 10.1.2.3
		{"8.8.8.8", "", ""},
		{"100.128.0.1", "", ""},
		{"172.32.0.1", "", ""},
		{"2001:4860:4860::8888", "", ""},
		{"::ffff:8.8.8.8", "", ""},
		{"127.0.0.1", "127.0.0.0/8", ""},
		{"::ffff:127.0.0.1", "127.0.0.0/8", ""},
		{"::1", "127.0.0.0/8", "loopback"},
		{"::1", "::1/128", ""},
		{"10.1.2.3", "10.1.0.0/16", ""},
		{"10.2.0.1", "10.1.0.0/16", "private"},
		{"169.254.169.254", "127.0.0.0/8", "link-local"},
	} {
		var allow []netip.Prefix
		if tc.allow != "" {
			allow = []netip.Prefix{netip.MustParsePrefix(tc.allow)}
		}
		if got := callbackRefusal(netip.MustParseAddr(tc.addr), allow); got != tc.want {
			t.Errorf("callbackRefusal(%s, allow %q) = %q, want %q", tc.addr, tc.allow, got, tc.want)
		}
	}
	if got := callbackRefusal(netip.Addr{}, nil); got == "" {
		t.Error("the zero address is allowed")
	}
}

func TestCallbackQueueBound(t *testing.T) {
	t.Run("queued", func(t *testing.T) {
		n := startNotifier(t, notifierConfig{capacity: 2}, 0) // no workers: nothing leaves the queue
		for i := range 5 {
			n.enqueue(record("c1-"+string(rune('a'+i)), "http://127.0.0.1:1/"))
		}
		if len(n.ch) != 2 || n.count("dropped") != 3 {
			t.Fatalf("%d queued, %d dropped; want 2 and 3", len(n.ch), n.count("dropped"))
		}
	})
	t.Run("waiting for a retry", func(t *testing.T) {
		r := newReceiver(t, 503)
		n := startNotifier(t, notifierConfig{allow: loopback, capacity: 1, backoff: time.Hour}, 4)
		n.enqueue(record("c1-a", r.URL))
		testkit.WaitFor(t, 10*time.Second, "the first attempt to fail", func() bool { return n.count("retry") == 1 })
		n.enqueue(record("c1-b", r.URL)) // the retry of c1-a holds the only place
		if n.count("dropped") != 1 || r.hits.Load() != 1 {
			t.Fatalf("counts %v, %d requests; want c1-b dropped", n.counts(), r.hits.Load())
		}
	})
}

// A callback waiting for its retry holds no worker, and is dropped when the
// notifier stops.
func TestCallbackRetryHoldsNoWorker(t *testing.T) {
	failing := newReceiver(t, 503)
	ok := newReceiver(t)
	n := startNotifier(t, notifierConfig{allow: loopback, backoff: 5 * time.Second}, 1)
	n.enqueue(record("c1-a", failing.URL))
	testkit.WaitFor(t, 10*time.Second, "the first attempt to fail", func() bool { return n.count("retry") == 1 })
	began := time.Now()
	n.enqueue(record("c1-b", ok.URL))
	testkit.WaitFor(t, 10*time.Second, "the second callback", func() bool { return n.count("ok") == 1 })
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("the second callback took %v: the worker waited for the first one's backoff", d)
	}
	began = time.Now()
	n.stop()
	if d := time.Since(began); d > 2*time.Second || failing.hits.Load() != 1 {
		t.Errorf("stop took %v, %d attempts of the failing callback; want at once, 1", d, failing.hits.Load())
	}
}

// panicTransport panics on the first request, then sends the others.
type panicTransport struct {
	next  http.RoundTripper
	fired atomic.Bool
}

func (p *panicTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.fired.CompareAndSwap(false, true) {
		panic("a broken transport")
	}
	return p.next.RoundTrip(r)
}

// TestAPanicDeliveringACallbackDropsOnlyIt: the callback whose delivery
// panics is dropped, logged with its stack and counted; the notifier's
// worker goes on with the next one, and its place in the bound is freed.
func TestAPanicDeliveringACallbackDropsOnlyIt(t *testing.T) {
	rcv := newReceiver(t)
	// A short timeout: net/http's timer goroutine of the request that
	// panicked out of Client.Do lives until it.
	n := startNotifier(t, notifierConfig{timeout: 100 * time.Millisecond, attempts: 1, allow: loopback}, 1)
	n.client.Transport = &panicTransport{next: n.client.Transport}
	n.enqueue(record("c1-1", rcv.URL))
	n.enqueue(record("c1-2", rcv.URL))
	select {
	case v := <-rcv.bodies:
		if v.ID != "c1-2" {
			t.Fatalf("delivered %s, want c1-2 (c1-1's delivery panicked)", v.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the callback after the panic was not delivered")
	}
	if got := testutil.ToFloat64(n.m.panics.WithLabelValues("callback")); got != 1 {
		t.Errorf("cellkit_cell_panics_total{step=callback} = %v, want 1", got)
	}
	if logs := n.logs.String(); !strings.Contains(logs, "panic while delivering a callback") || !strings.Contains(logs, "a broken transport") || !strings.Contains(logs, "goroutine") {
		t.Errorf("the panic is not logged with its stack:\n%s", logs)
	}
	testkit.WaitFor(t, 5*time.Second, "the bound's place freed", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.pending == 0
	})
}
