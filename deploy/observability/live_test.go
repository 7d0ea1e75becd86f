package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/drill"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestLivePackMatchesStack starts the local stack with the programs in
// ./bin (cellctl dev up on free ports), sends a little traffic through the
// router, scrapes every target of the stack's targets file, lints each
// scrape with promtool, and checks every metric and label name of the rule
// files and dashboards against what the stack exported. A metric renamed in
// the code, or a label dropped, fails it.
func TestLivePackMatchesStack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the local stack")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin")
	promtool := filepath.Join(bin, "promtool")
	if _, err := os.Stat(promtool); err != nil {
		t.Fatalf("%s: %v: run make tools", promtool, err)
	}
	for _, name := range []string{"cellctl", "agencysim", "cell", "router"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Fatalf("%v: run make build", err)
		}
	}
	exprs := packExprs(t)
	if t.Failed() {
		t.FailNow()
	}
	if out, err := exec.Command(promtool, "check", "config", "prometheus/prometheus.yml").CombinedOutput(); err != nil {
		t.Errorf("promtool check config prometheus/prometheus.yml: %v\n%s", err, out)
	}

	ctx := testkit.Context(t, 3*time.Minute)
	st, err := drill.StartStack(ctx, bin, "--cells", "2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range st.Processes {
				b, _ := os.ReadFile(p.Log)
				t.Logf("%s.log (end):\n%s", p.Name, tail(string(b), 20))
			}
		}
		st.Stop(context.Background())
	})
	var targets []target
	b, err := os.ReadFile(filepath.Join(st.Dir, "prometheus", "targets.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &targets); err != nil {
		t.Fatalf("targets.json: %v", err)
	}
	if len(targets) != len(st.Processes) {
		t.Fatalf("targets.json lists %d targets, the stack runs %d processes", len(targets), len(st.Processes))
	}

	failAgency(t, st, targets)
	sendTraffic(t, st)

	exp := newExports(targets)
	if exp.rare, err = loadRare(root); err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		job := tg.Labels["job"]
		for _, addr := range tg.Targets {
			body := scrape(t, "http://"+addr+"/metrics")
			lint(t, promtool, fmt.Sprintf("%s %v", addr, tg.Labels), body)
			if err := exp.add(job, body); err != nil {
				t.Fatalf("parse the scrape of %s (%s): %v", addr, job, err)
			}
		}
	}

	c := newChecker(exp)
	for _, e := range exprs {
		c.check(e)
	}
	for _, p := range c.problems {
		t.Error(p)
	}
	t.Logf("%d expressions, %d metric names checked against %d exported families of %d targets",
		len(exprs), len(c.names), len(exp.families), len(targets))
	for name := range c.names {
		if _, scraped := exp.families[name]; !scraped && rareMetrics[name] != "" {
			t.Logf("%s: not exported by this run (it needs %s); checked against the code and docs/metrics.md", name, rareMetrics[name])
		}
	}
}

// failAgency makes the simulated KCB answer every request with an error
// until a cell has counted a failed pipeline attempt
// (cellkit_cell_failures_total), then makes it healthy again; the
// inquiries it failed are retried.
func failAgency(t *testing.T, st *drill.Stack, targets []target) {
	t.Helper()
	config := st.AgencyAdmin + "/v1/agencies/kcb/config"
	patch := func(rate float64) {
		t.Helper()
		if r := testkit.Do(t, nil, http.MethodPatch, config, map[string]any{"error_rate": rate}, nil); r.Status != http.StatusOK {
			t.Fatalf("PATCH %s error_rate %v = %d %s", config, rate, r.Status, r.Body)
		}
	}
	patch(1)
	defer patch(0)
	key := map[string]string{"X-API-Key": st.APIKey}
	for i := range 4 {
		body := map[string]any{"user_id": fmt.Sprintf("fail-%d", i), "product": "credit_loan", "amount": 1000000, "priority": "high"}
		if r := testkit.Do(t, nil, http.MethodPost, st.Router+"/v1/inquiries", body, key); r.Status != http.StatusAccepted {
			t.Fatalf("POST /v1/inquiries = %d %s, want 202", r.Status, r.Body)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "a cell to count a failed attempt", func() bool {
		for _, tg := range targets {
			if tg.Labels["job"] == "cellkit-cell" && bytes.Contains(scrape(t, "http://"+tg.Targets[0]+"/metrics"), []byte("\ncellkit_cell_failures_total{")) {
				return true
			}
		}
		return false
	})
}

// sendTraffic posts inquiries through the router with the stack's key and
// waits until they are done (one asks for a callback, so that callbacks are
// counted), then sends a request with an unknown key and one to an unknown
// path, so that the labelled counters of those answers exist.
func sendTraffic(t *testing.T, st *drill.Stack) {
	t.Helper()
	var callbacks atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		callbacks.Add(1)
	}))
	t.Cleanup(receiver.Close)
	key := map[string]string{"X-API-Key": st.APIKey}
	var status []string
	for i := range 6 {
		body := map[string]any{"user_id": fmt.Sprintf("u-%d", i), "product": "credit_loan", "amount": 5000000, "priority": "high"}
		if i == 0 {
			body["callback_url"] = receiver.URL + "/callback"
		}
		if i%2 == 1 {
			body["priority"] = "normal"
		}
		resp := testkit.Do(t, nil, http.MethodPost, st.Router+"/v1/inquiries", body, key)
		if resp.Status != http.StatusAccepted {
			t.Fatalf("POST /v1/inquiries = %d %s, want 202", resp.Status, resp.Body)
		}
		var acc struct {
			StatusURL string `json:"status_url"`
		}
		resp.JSON(t, &acc)
		status = append(status, acc.StatusURL)
	}
	for _, u := range status {
		testkit.WaitFor(t, 30*time.Second, u+" to be done", func() bool {
			var rec struct{ Status string }
			testkit.Do(t, nil, http.MethodGet, st.Router+u, nil, key).JSON(t, &rec)
			return rec.Status == "done" || rec.Status == "failed"
		})
	}
	testkit.WaitFor(t, 30*time.Second, "the callback", func() bool { return callbacks.Load() > 0 })

	bad := testkit.Do(t, nil, http.MethodPost, st.Router+"/v1/inquiries",
		map[string]any{"user_id": "u-1", "product": "credit_loan", "amount": 1, "priority": "high"},
		map[string]string{"X-API-Key": "ck_not_a_key"})
	if bad.Status != http.StatusUnauthorized && bad.Status != http.StatusForbidden {
		t.Errorf("POST with an unknown key = %d, want 401 or 403", bad.Status)
	}
	if r := testkit.Do(t, nil, http.MethodGet, st.Router+"/v1/no-such-path", nil, key); r.Status/100 != 4 {
		t.Errorf("GET /v1/no-such-path = %d, want a 4xx", r.Status)
	}
}

func scrape(t *testing.T, url string) []byte {
	t.Helper()
	r := testkit.Do(t, nil, http.MethodGet, url, nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s = %d", url, r.Status)
	}
	return r.Body
}

// lint runs promtool check metrics on one scrape.
func lint(t *testing.T, promtool, what string, body []byte) {
	t.Helper()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on the scrape of %s: %v\n%s", what, err, out)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
