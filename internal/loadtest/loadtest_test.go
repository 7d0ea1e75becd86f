package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/inquiry"
)

func TestParseSteps(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Step
		err  bool
	}{
		{"60:10s,200:5s", []Step{{60, 10 * time.Second}, {200, 5 * time.Second}}, false},
		{" 5:1s ", []Step{{5, time.Second}}, false},
		{"", nil, true},
		{"60", nil, true},
		{"x:1s", nil, true},
		{"5:0s", nil, true},
		{"-1:1s", nil, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSteps(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("ParseSteps(%q) error = %v, want error %v", tc.in, err, tc.err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("ParseSteps(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestSchedule(t *testing.T) {
	s := Schedule([]Step{{10, time.Second}, {0, time.Second}, {4, 2 * time.Second}})
	if len(s) != 18 {
		t.Fatalf("len = %d, want 18", len(s))
	}
	if s[1] != 100*time.Millisecond || s[10] != 2*time.Second || s[11] != 2250*time.Millisecond {
		t.Errorf("schedule = %v", s)
	}
	for i := 1; i < len(s); i++ {
		if s[i] < s[i-1] {
			t.Fatalf("not increasing at %d: %v", i, s)
		}
	}
}

func TestUsersZipf(t *testing.T) {
	u, err := NewUsers(100, 1.1, 7)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, 100)
	for range 20000 {
		counts[u.Next()]++
	}
	if counts[0] < 5*counts[50] || counts[0] < counts[1] {
		t.Errorf("zipf: user 0 %d, user 1 %d, user 50 %d: want a steep head", counts[0], counts[1], counts[50])
	}
	un, _ := NewUsers(10, 0, 7)
	seen := map[int]bool{}
	for range 1000 {
		seen[un.Next()] = true
	}
	if len(seen) != 10 {
		t.Errorf("uniform over 10 users saw %d", len(seen))
	}
	if _, err := NewUsers(0, 0, 1); err == nil {
		t.Error("NewUsers(0) accepted")
	}
}

func TestBodyIsValid(t *testing.T) {
	for seq := range 8 {
		if _, err := inquiry.DecodeRequest(Body(seq*7, seq, seq%2 == 0)); err != nil {
			t.Errorf("Body(%d) = %s: %v", seq, Body(seq*7, seq, seq%2 == 0), err)
		}
	}
	if !bytes.Equal(Body(3, 5, true), Body(3, 5, true)) {
		t.Error("Body is not deterministic")
	}
}

// fakeRouter answers like the router: 202 with an id for even users, 503
// with Retry-After for odd ones, Cellkit-Cell by parity.
func fakeRouter(t *testing.T, delay time.Duration) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.Header.Get("X-API-Key") != "k" || r.Header.Get("Idempotency-Key") == "" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var req inquiry.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		time.Sleep(delay)
		var u int
		fmt.Sscanf(req.UserID, "lt-u%d", &u)
		cell := []string{"c1", "c2"}[u%2]
		w.Header().Set("Cellkit-Cell", cell)
		if u%2 == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"id":"%s-%020d","cell":"%s","status":"pending"}`, cell, n.Load(), cell)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestRunOpenLoop(t *testing.T) {
	srv, n := fakeRouter(t, 0)
	var progress bytes.Buffer
	r, err := NewRunner(Config{Target: srv.URL, Key: "k", Steps: []Step{{100, 1500 * time.Millisecond}}, Users: 10, KeepSamples: true}, Options{Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	r.Mark("start")
	res, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 150 || n.Load() != 150 || len(res.Samples) != 150 {
		t.Fatalf("sent %d, server saw %d, samples %d; want 150", res.Sent, n.Load(), len(res.Samples))
	}
	if res.Status["202"]+res.Status["503"] != 150 || res.Status["202"] == 0 || res.Status["503"] == 0 {
		t.Errorf("status = %v", res.Status)
	}
	if res.Cells["c1"].Status["202"] != res.Status["202"] || res.Cells["c2"].Status["503"] != res.Status["503"] {
		t.Errorf("per cell = %+v %+v", res.Cells["c1"], res.Cells["c2"])
	}
	if len(res.Series) != 2 || len(res.Events) != 1 {
		t.Errorf("series %d seconds, events %v", len(res.Series), res.Events)
	}
	for _, s := range res.Samples {
		if s.Status == 202 && s.ID == "" {
			t.Errorf("sample %d: 202 without id", s.Seq)
		}
		if s.Status == 503 && !s.RetryAfter {
			t.Errorf("sample %d: Retry-After not seen", s.Seq)
		}
	}
	if !strings.Contains(progress.String(), "done") {
		t.Errorf("no progress line: %q", progress.String())
	}

	var text bytes.Buffer
	WriteText(&text, res)
	for _, want := range []string{"CELL", "c1", "c2", "all", "202", "503"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, text.String())
		}
	}
	dir := t.TempDir()
	if err := WriteJSONFile(filepath.Join(dir, "r.json"), res); err != nil {
		t.Fatal(err)
	}
	if err := WriteSVGFile(filepath.Join(dir, "r.svg"), res); err != nil {
		t.Fatal(err)
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "r.svg"))
	if !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "polyline") || !strings.Contains(string(svg), ">start<") {
		t.Errorf("svg = %.300s", svg)
	}
}

// A stalled server must show in the latency of the requests scheduled
// meanwhile (measured from their intended time), not in fewer requests.
func TestRunNoCoordinatedOmission(t *testing.T) {
	srv, n := fakeRouter(t, 300*time.Millisecond)
	r, err := NewRunner(Config{Target: srv.URL, Key: "k", Steps: []Step{{10, time.Second}}, Users: 2, KeepSamples: true, MaxInflight: 1}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n.Load() != 10 {
		t.Fatalf("server saw %d, want 10", n.Load())
	}
	// One at a time, 300 ms each, one intended every 100 ms: the 4th waits
	// for the 3 before it.
	if res.Samples[3].Latency < 3*300*time.Millisecond {
		t.Errorf("4th request latency %v: want ≥ 900ms (queued behind 3 stalled requests)", res.Samples[3].Latency)
	}
}

// A server that stalls every request arriving between 300 and 600 ms
// until 600 ms: the requests due meanwhile are still sent on time (there
// are senders enough), and each one's latency counts the stall from its
// intended time.
func TestRunStalledServer(t *testing.T) {
	const from, until = 300 * time.Millisecond, 600 * time.Millisecond
	var r *Runner
	var mu sync.Mutex
	arrived := map[string]time.Duration{} // Idempotency-Key → arrival
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		at := r.Elapsed()
		mu.Lock()
		arrived[req.Header.Get("Idempotency-Key")] = at
		mu.Unlock()
		if at >= from && at < until {
			time.Sleep(until - at)
		}
		w.Header().Set("Cellkit-Cell", "c1")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{"id":"c1-x"}`)
	}))
	t.Cleanup(srv.Close)
	var err error
	r, err = NewRunner(Config{Target: srv.URL, Key: "k", Steps: []Step{{100, time.Second}}, Users: 10, KeepSamples: true, MaxInflight: 64}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 100 || len(res.Samples) != 100 {
		t.Fatalf("sent %d, samples %d; want 100", res.Sent, len(res.Samples))
	}
	stalled := 0
	for _, s := range res.Samples {
		// The stall lasts 300 ms; a generator held up by it would send the
		// requests due meanwhile that late. (The first ones may be late
		// anyway while the senders start.)
		if late := arrived[s.Key] - s.At; s.At >= 100*time.Millisecond && late > 100*time.Millisecond {
			t.Errorf("request %d (due %v) arrived %v late: the stall held up sending", s.Seq, s.At, late)
		}
		if s.At >= from+10*time.Millisecond && s.At < until-10*time.Millisecond {
			stalled++
			if want := until - s.At; s.Latency < want-5*time.Millisecond {
				t.Errorf("request %d due at %v: latency %v, want ≥ %v (until the stall ends)", s.Seq, s.At, s.Latency, want)
			}
		}
	}
	if stalled < 25 {
		t.Errorf("%d requests in the stall, want ~28", stalled)
	}
	if all := (Window{To: time.Second}).Stats(res.Samples); all.P99 < 250*time.Millisecond {
		t.Errorf("p99 %v: the stall is missing from the latency", all.P99)
	}
}

func TestStats(t *testing.T) {
	ss := []Sample{
		{At: 0, User: 1, Status: 202, Latency: time.Millisecond, Cell: "c1"},
		{At: time.Second, User: 2, Status: 503, Latency: 2 * time.Millisecond, Cell: "c2", RetryAfter: true},
		{At: time.Second, User: 2, Status: 503, Latency: 3 * time.Millisecond, Cell: "c2"},
		{At: 2 * time.Second, User: 2, Err: "timeout", Latency: 5 * time.Second},
	}
	st := Window{From: time.Second, To: 3 * time.Second, Users: func(u int) bool { return u == 2 }}.Stats(ss)
	if st.N != 3 || st.Errors != 3 || st.Timeouts != 1 || st.NoRetryAfter != 1 || st.P99 != 5*time.Second {
		t.Errorf("stats = %+v", st)
	}
	// The timeout, sent at 2 s, ended at 7 s: still in flight at 3 s.
	if st := (Window{From: time.Second, To: 3 * time.Second, AnsweredBy: 3 * time.Second}).Stats(ss); st.N != 2 || st.Timeouts != 0 {
		t.Errorf("stats answered by 3s = %+v", st)
	}
	if uc := UserCells(ss, 0, 2*time.Second); uc[1] != "c1" || uc[2] != "c2" {
		t.Errorf("UserCells = %v", uc)
	}
}

func TestHighShareIsSpreadAndFixed(t *testing.T) {
	for _, share := range []float64{0.2, 0.5} {
		n := 0
		for seq := range 10_000 {
			if highOf(seq, share) {
				n++
			}
		}
		if got := float64(n) / 10_000; got < share-0.01 || got > share+0.01 {
			t.Errorf("share %g: %.3f of requests ask for high", share, got)
		}
	}
	if highOf(7, -1) || highOf(7, 0) {
		t.Error("a share of 0 or less asks for high")
	}
}

// An https router whose certificate names another host than the address
// called (a Service's cluster IP): checked against --ca for
// --server-name; without them, or with another name, nothing is
// accepted.
func TestRunOverTLSWithACAAndAName(t *testing.T) {
	plain, _ := fakeRouter(t, 0)
	srv := httptest.NewUnstartedServer(plain.Config.Handler)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(caFile, name string) *Result {
		t.Helper()
		r, err := NewRunner(Config{Target: srv.URL, Key: "k", Steps: []Step{{50, 400 * time.Millisecond}}, Users: 10, CA: caFile, ServerName: name}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// httptest's certificate names example.com (and 127.0.0.1).
	if res := run(ca, "example.com"); res.Status["202"] == 0 || res.Status["0"] > 0 {
		t.Errorf("with the CA and its name: %v", res.Status)
	}
	if res := run(ca, "router.example"); res.Status["202"] > 0 {
		t.Errorf("with a name the certificate lacks: %v", res.Status)
	}
	if res := run("", "example.com"); res.Status["202"] > 0 {
		t.Errorf("without the CA: %v", res.Status)
	}
	if _, err := NewRunner(Config{Target: srv.URL, Key: "k", Steps: []Step{{1, time.Second}}, CA: filepath.Join(t.TempDir(), "none.pem")}, Options{}); err == nil || !strings.Contains(err.Error(), "CA file") {
		t.Errorf("a missing CA file: %v", err)
	}
}
