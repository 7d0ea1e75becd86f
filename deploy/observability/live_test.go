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

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

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
	targets := readTargets(t, st)
	if want := len(st.Scraped()); len(targets) != want {
		t.Fatalf("targets.json lists %d targets, the stack runs %d processes besides the console", len(targets), want)
	}

	// Before any traffic: every series the pack reads is there, at 0 for
	// a counter, so that an alert on it fires on the first event.
	fresh := newExports(targets)
	scrapeAll(t, nil, st, targets, fresh)
	for _, p := range unreadAtStart(exprs, fresh, func(name string) bool { return !tlsOnly[name] }) {
		t.Error(p)
	}

	failAgency(t, st, targets)
	sendTraffic(t, st)

	exp := newExports(targets)
	exp.rare = rareFromCatalogue(t)
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
			t.Logf("%s: not exported by this run (it needs %s); checked against the catalogue", name, rareMetrics[name])
		}
	}
}

// tlsOnly are the metrics of the pack that only a process with TLS
// exports; TestLivePackTLSSeries finds them on a stack on TLS.
var tlsOnly = setOf("cellkit_tls_certificate_expiry_timestamp_seconds")

// TestLivePackTLSSeries starts the local stack on TLS (cellctl dev up
// --tls) and finds, before any traffic, every series of the pack's TLS-only
// metrics, scraped as Prometheus would with the operator's certificate.
func TestLivePackTLSSeries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the local stack")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	exprs := packExprs(t)
	ctx := testkit.Context(t, 3*time.Minute)
	st, err := drill.StartStack(ctx, filepath.Join(root, "bin"), "--cells", "1", "--tls")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Stop(context.Background()) })
	if st.TLS == nil {
		t.Fatal("dev up --tls recorded no certificates in its dev.json")
	}
	client, err := st.TLS.Client(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	targets := readTargets(t, st)
	fresh := newExports(targets)
	scrapeAll(t, client, st, targets, fresh)
	for _, p := range unreadAtStart(exprs, fresh, func(name string) bool { return tlsOnly[name] }) {
		t.Error(p)
	}
}

// readTargets reads the stack's file_sd targets file.
func readTargets(t *testing.T, st *drill.Stack) []target {
	t.Helper()
	var targets []target
	b, err := os.ReadFile(filepath.Join(st.Dir, "prometheus", "targets.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &targets); err != nil {
		t.Fatalf("targets.json: %v", err)
	}
	return targets
}

// scrapeAll scrapes every target of st with client (nil: the default) into
// x, each over the scheme of its process's readiness URL.
func scrapeAll(t *testing.T, client *http.Client, st *drill.Stack, targets []target, x *exports) {
	t.Helper()
	schemes := map[string]string{}
	for _, p := range st.Processes {
		scheme, _, _ := strings.Cut(p.Ready, "://")
		schemes[p.Addrs["admin"]] = scheme
	}
	for _, tg := range targets {
		for _, addr := range tg.Targets {
			scheme := schemes[addr]
			if scheme == "" {
				t.Fatalf("target %s is no process's admin listener", addr)
			}
			r := testkit.Do(t, client, http.MethodGet, scheme+"://"+addr+"/metrics", nil, nil)
			if r.Status != http.StatusOK {
				t.Fatalf("GET %s://%s/metrics = %d", scheme, addr, r.Status)
			}
			if err := x.addTarget(tg.Labels, r.Body); err != nil {
				t.Fatalf("parse the scrape of %s (%v): %v", addr, tg.Labels, err)
			}
		}
	}
}

// unreadAtStart checks the pack's selectors of the metrics for which
// checked is true against the scrapes of a stack that has served nothing
// yet: each must select at least one series. A counter vector whose series
// appear only at their first event is born at 1, and rate() and increase()
// see no increase from a series' first sample, so an alert on it would not
// fire on that event. Recorded series and Prometheus's own are not
// checked; a histogram's bucket is checked without its le matcher.
func unreadAtStart(exprs []packExpr, fresh *exports, checked func(name string) bool) []string {
	recorded := set{}
	for _, e := range exprs {
		if e.record != "" {
			recorded[e.record] = true
		}
	}
	var problems []string
	seen := set{}
	for _, e := range exprs {
		parser.Inspect(e.expr, func(node parser.Node, _ []parser.Node) error {
			vs, ok := node.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			name := vs.Name
			if name == "" || recorded[name] || prometheusOwn[name] || !checked(name) || seen[vs.String()] {
				return nil
			}
			seen[vs.String()] = true
			f, bucket := fresh.families[name], false
			for _, sfx := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, sfx); ok && f == nil {
					f, bucket = fresh.families[base], sfx == "_bucket"
				}
			}
			if f == nil {
				problems = append(problems, fmt.Sprintf("%s: %s is not exported by a stack that has served nothing yet: an alert on it cannot fire on the first event", e.where, name))
				return nil
			}
			for _, series := range f.series {
				if selects(vs, series, bucket) {
					return nil
				}
			}
			problems = append(problems, fmt.Sprintf("%s: %s selects none of the %d series of %s that a stack exports before it has served anything: an alert on it cannot fire on the first event", e.where, vs, len(f.series), name))
			return nil
		})
	}
	return problems
}

// selects says whether the selector's matchers (le aside for a bucket)
// match a series' labels; a label the series lacks is "", as in PromQL.
func selects(vs *parser.VectorSelector, series map[string]string, bucket bool) bool {
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel || (bucket && m.Name == "le") {
			continue
		}
		if !m.Matches(series[m.Name]) {
			return false
		}
	}
	return true
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
			if tg.Labels["job"] == "cellkit-cell" && counterSum(t, scrape(t, "http://"+tg.Targets[0]+"/metrics"), "cellkit_cell_failures_total") > 0 {
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

// counterSum is the sum of a counter's series in a scrape.
func counterSum(t *testing.T, body []byte, name string) float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse a scrape: %v", err)
	}
	sum := 0.0
	for _, m := range mfs[name].GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
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
