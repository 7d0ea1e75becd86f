package gate

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

const scrapeBefore = `# TYPE cellkit_cell_intake_requests_total counter
cellkit_cell_intake_requests_total{cell="c1",code="202",route="post"} 100
cellkit_cell_intake_requests_total{cell="c1",code="503",route="post"} 7
cellkit_cell_intake_requests_total{cell="c1",code="500",route="post"} 1
cellkit_cell_intake_requests_total{cell="c1",code="200",route="get"} 40
# TYPE cellkit_cell_deliveries_total counter
cellkit_cell_deliveries_total{cell="c1",outcome="done"} 90
cellkit_cell_deliveries_total{cell="c1",outcome="failed"} 2
cellkit_cell_deliveries_total{cell="c1",outcome="dead"} 1
cellkit_cell_deliveries_total{cell="c1",outcome="retry"} 30
# TYPE cellkit_cell_panics_total counter
cellkit_cell_panics_total{cell="c1",step="pipeline"} 0
# TYPE cellkit_cell_intake_seconds histogram
cellkit_cell_intake_seconds_bucket{cell="c1",route="post",le="0.01"} 80
cellkit_cell_intake_seconds_bucket{cell="c1",route="post",le="0.1"} 105
cellkit_cell_intake_seconds_bucket{cell="c1",route="post",le="+Inf"} 108
cellkit_cell_intake_seconds_sum{cell="c1",route="post"} 1.5
cellkit_cell_intake_seconds_count{cell="c1",route="post"} 108
cellkit_cell_intake_seconds_bucket{cell="c1",route="get",le="0.01"} 40
cellkit_cell_intake_seconds_bucket{cell="c1",route="get",le="0.1"} 40
cellkit_cell_intake_seconds_bucket{cell="c1",route="get",le="+Inf"} 40
cellkit_cell_intake_seconds_sum{cell="c1",route="get"} 0.1
cellkit_cell_intake_seconds_count{cell="c1",route="get"} 40
`

// TestSampleAndWindow: a scrape's totals are read as the gates count
// them (POSTs only, 503 a refusal, done/failed/dead settled), a window is
// two scrapes' difference, and a process restarted in the window counts
// from zero.
func TestSampleAndWindow(t *testing.T) {
	before := sampleOf(t, scrapeBefore)
	if before.Intake != (Counts{108, 1}) || before.Refusals != (Counts{108, 7}) || before.Inquiries != (Counts{93, 3}) || before.IntakeLatency.Count() != 108 {
		t.Fatalf("sample %+v", before)
	}
	after := sampleOf(t, strings.NewReplacer(
		`code="202",route="post"} 100`, `code="202",route="post"} 300`,
		`code="500",route="post"} 1`, `code="500",route="post"} 21`,
		`outcome="done"} 90`, `outcome="done"} 250`,
		`step="pipeline"} 0`, `step="pipeline"} 2`,
		`route="post",le="+Inf"} 108`, `route="post",le="+Inf"} 328`,
	).Replace(scrapeBefore))
	w := after.Since(before)
	if w.Intake != (Counts{220, 20}) || w.Inquiries != (Counts{160, 0}) || w.Panics != 2 || w.IntakeLatency.Count() != 220 {
		t.Fatalf("window %+v", w)
	}
	// A restart: the counters went down, the window counts what the new
	// process did.
	restarted := after.Since(sampleOf(t, strings.ReplaceAll(scrapeBefore, `code="202",route="post"} 100`, `code="202",route="post"} 900`)))
	if restarted.Intake.Total != after.Intake.Total {
		t.Errorf("a restarted counter: %+v, want the new process's %d", restarted.Intake, after.Intake.Total)
	}
	sum := Sum(w, w)
	if sum.Intake != (Counts{440, 40}) || sum.IntakeLatency.Count() != 440 {
		t.Errorf("sum %+v", sum)
	}
	cfg := DefaultConfig()
	vs := cfg.Judge(w, []Baseline{{Name: BaselineOld, Sample: Sample{Intake: Counts{2000, 2}, Inquiries: Counts{1800, 1}}}})
	if Overall(vs) != Fail || vs[0].Decision != Fail || vs[0].Gate != GateIntake5xx {
		t.Errorf("a wave failing 9%% of its POSTs: %+v", vs)
	}
}

const routerScrape = `# TYPE cellkit_router_requests_total counter
cellkit_router_requests_total{cell="c1",code="202"} 900
cellkit_router_requests_total{cell="c1",code="504"} 40
cellkit_router_requests_total{cell="c1",code="503"} 60
cellkit_router_requests_total{cell="c2",code="202"} 500
cellkit_router_requests_total{cell="none",code="401"} 70
# TYPE cellkit_router_shed_total counter
cellkit_router_shed_total{cell="c1",reason="breaker"} 25
cellkit_router_shed_total{cell="c1",reason="bulkhead"} 35
# TYPE cellkit_router_request_duration_seconds histogram
cellkit_router_request_duration_seconds_bucket{cell="c1",le="0.1"} 990
cellkit_router_request_duration_seconds_bucket{cell="c1",le="+Inf"} 1000
cellkit_router_request_duration_seconds_sum{cell="c1"} 30
cellkit_router_request_duration_seconds_count{cell="c1"} 1000
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.7e+09
`

// TestEdgeAndHealth: a router's figures are read by cell (5xx but 503
// failed, with the open breaker's 503s; the requests answered before
// routing left out), a window of them restarts from zero with the
// router, and crash restarts or readiness losses fail a wave only
// beyond the baseline's worst process.
func TestEdgeAndHealth(t *testing.T) {
	mfs := parse(t, routerScrape)
	if got, err := StartedOf(mfs); got != 1.7e9 || err != nil {
		t.Errorf("start time %v, %v", got, err)
	}
	edge, err := EdgeOf(mfs)
	if _, ok := edge["none"]; ok || len(edge) != 2 || err != nil {
		t.Fatalf("cells %v, %v", edge, err)
	}
	// c1's 503s: 25 of its open breaker (failures), 35 refusals.
	if c1 := edge["c1"]; c1.Requests != (Counts{1000, 65}) || c1.Refusals != (Counts{1000, 35}) || c1.Latency.Count() != 1000 {
		t.Errorf("c1 %+v, refused %+v", c1.Requests, c1.Refusals)
	}
	if w := edge["c1"].Since(Edge{Requests: Counts{400, 5}}); w.Requests != (Counts{600, 60}) {
		t.Errorf("window %+v", w.Requests)
	}
	if w := edge["c2"].Since(Edge{Requests: Counts{9000, 0}}); w.Requests.Total != 500 {
		t.Errorf("a restarted router's window %+v", w.Requests)
	}
	// A router's own figures: its answers before routing too (70 × 401,
	// refusals of its keys).
	own, err := RouterSampleOf(mfs)
	if err != nil || own.Edge != (Counts{1570, 65}) || own.EdgeRefusals != (Counts{1570, 105}) {
		t.Errorf("the router's own figures: %+v, refused %+v, %v", own.Edge, own.EdgeRefusals, err)
	}

	cfg := DefaultConfig()
	quiet := Sample{}
	if vs := cfg.Judge(quiet, []Baseline{{Name: BaselineOld, Sample: quiet}}); len(vs) != 9 || Overall(vs) != Wait {
		t.Errorf("no routers: %d verdicts, %v", len(vs), Overall(vs))
	}
	wave := Sample{Routers: 2, Edge: Counts{1000, 65}}
	base := Sample{Routers: 2, Edge: Counts{3000, 3}}
	vs := cfg.Judge(wave, []Baseline{{Name: BaselineOld, Sample: base}})
	if len(vs) != 13 || vs[7].Gate != GateEdge5xx || vs[7].Decision != Fail {
		t.Errorf("the routers' 6.5%% failures of the wave's cells: %+v", vs)
	}

	sum := Sum(Sample{Health: Health{Restarts: 1}}, Sample{Health: Health{Flaps: 3}})
	if sum.Health != (Health{Restarts: 1, Flaps: 3}) {
		t.Errorf("the worst process's health: %+v", sum.Health)
	}
	for _, c := range []struct {
		wave, base int64
		want       Decision
	}{{0, 0, Pass}, {1, 0, Fail}, {1, 1, Pass}, {2, 1, Fail}} {
		if got := Events("crash restarts", c.wave, Of[int64]{Name: BaselineOld, V: c.base}); got.Decision != c.want {
			t.Errorf("Events(%d, %d) = %v, want %v", c.wave, c.base, got.Decision, c.want)
		}
	}
}

// TestReadyOf: a cell's scrape is ready when its readiness gauge says 1,
// not when it says 0 or is missing.
func TestReadyOf(t *testing.T) {
	for text, want := range map[string]bool{
		"# TYPE cellkit_cell_ready gauge\ncellkit_cell_ready{cell=\"c1\"} 1\n": true,
		"# TYPE cellkit_cell_ready gauge\ncellkit_cell_ready{cell=\"c1\"} 0\n": false,
		routerScrape: false,
	} {
		if got := ReadyOf(parse(t, text)); got != want {
			t.Errorf("ReadyOf(%q) = %v, want %v", text[:40], got, want)
		}
	}
}

// TestAlerts: an alert firing for the wave alone fails it; one firing for
// the baseline too does not; alerts that cannot be read wait.
func TestAlerts(t *testing.T) {
	for _, c := range []struct {
		wave, base []string
		unread     string
		want       Decision
	}{
		{nil, nil, "", Pass},
		{[]string{"CellkitShedRateHigh"}, nil, "", Fail},
		{[]string{"CellkitAgencyBreakerOpen"}, []string{"CellkitAgencyBreakerOpen"}, "", Pass},
		{[]string{"CellkitAgencyBreakerOpen", "CellkitInquiryPanics"}, []string{"CellkitAgencyBreakerOpen"}, "", Fail},
		{nil, nil, "prometheus unreachable", Wait},
	} {
		if got := Alerts(c.wave, c.base, c.unread); got.Decision != c.want {
			t.Errorf("Alerts(%v, %v, %q) = %v (%s), want %v", c.wave, c.base, c.unread, got.Decision, got.Text, c.want)
		}
	}
}

func sampleOf(t *testing.T, text string) Sample {
	t.Helper()
	s, err := SampleOf(parse(t, text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRefusingWave: a scrape's 503s are the refusals gate's, not the
// 5xx gate's; a cell that refuses 45 % of its POSTs (450 of 1,000) while
// the baseline refuses none fails by it, its 5xx passing.
func TestRefusingWave(t *testing.T) {
	refusing := sampleOf(t, `# TYPE cellkit_cell_intake_requests_total counter
cellkit_cell_intake_requests_total{cell="c1",code="202",route="post"} 550
cellkit_cell_intake_requests_total{cell="c1",code="503",route="post"} 450
`)
	if refusing.Intake != (Counts{1000, 0}) || refusing.Refusals != (Counts{1000, 450}) {
		t.Fatalf("the refusing scrape: intake %+v, refusals %+v", refusing.Intake, refusing.Refusals)
	}
	base := Sample{Intake: Counts{3000, 0}, Refusals: Counts{3000, 0}}
	vs := DefaultConfig().Judge(refusing, []Baseline{{Name: BaselineOld, Sample: base}})
	if vs[0].Gate != GateIntake5xx || vs[0].Decision != Pass || vs[1].Gate != GateIntakeRefused || vs[1].Decision != Fail {
		t.Errorf("the refusing wave: %+v", vs[:2])
	}
	// The routers' view: 503s other than the breaker's refused.
	edge := Sample{Routers: 1, Edge: Counts{1000, 0}, EdgeRefusals: Counts{1000, 450}}
	vs = DefaultConfig().Judge(edge, []Baseline{{Name: BaselineOld, Sample: Sample{Routers: 1, Edge: Counts{3000, 0}, EdgeRefusals: Counts{3000, 1}}}})
	if vs[8].Gate != GateEdgeRefused || vs[8].Decision != Fail {
		t.Errorf("the routers' refusals: %+v", vs[8])
	}
	// A wave of routers whose release turns 30 % of the users away with
	// 429 (a client rate limit set too low), against its own figures
	// from before.
	limited, err := RouterSampleOf(parse(t, `# TYPE cellkit_router_requests_total counter
cellkit_router_requests_total{cell="c1",code="202"} 700
cellkit_router_requests_total{cell="none",code="429"} 300
`))
	if err != nil {
		t.Fatal(err)
	}
	vs = DefaultConfig().JudgeRouters(limited, []Baseline{{Name: BaselineBefore, Sample: Sample{Routers: 1, Edge: Counts{1000, 0}, EdgeRefusals: Counts{1000, 2}}}})
	if vs[1].Gate != GateRouterRefused || vs[1].Decision != Fail || vs[0].Decision != Pass {
		t.Errorf("a router refusing 30%% with 429: %+v", vs[:2])
	}
}

// TestScrapeValuesThatAreNoNumbers: NaN, an infinity or a negative count,
// and histogram buckets out of order, are errors — never figures the
// gates judge by (int64(NaN) is the smallest int64: a window of billions).
func TestScrapeValuesThatAreNoNumbers(t *testing.T) {
	for _, bad := range []string{"NaN", "+Inf", "-Inf", "-3"} {
		text := strings.Replace(scrapeBefore, `code="500",route="post"} 1`, `code="500",route="post"} `+bad, 1)
		if _, err := SampleOf(parse(t, text)); err == nil || !strings.Contains(err.Error(), "not a count") {
			t.Errorf("an intake count of %s: %v", bad, err)
		}
		text = strings.Replace(routerScrape, `code="504"} 40`, `code="504"} `+bad, 1)
		if _, err := EdgeOf(parse(t, text)); err == nil {
			t.Errorf("a router count of %s: no error", bad)
		}
		if _, err := RouterSampleOf(parse(t, text)); err == nil {
			t.Errorf("a router's own count of %s: no error", bad)
		}
	}
	if _, err := StartedOf(parse(t, "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds NaN\n")); err == nil {
		t.Error("a start time of NaN: no error")
	}
	text := strings.Replace(scrapeBefore, `route="post",le="0.1"} 105`, `route="post",le="0.1"} 70`, 1)
	if _, err := SampleOf(parse(t, text)); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Errorf("cumulative counts that go down: %v", err)
	}
}

// TestUnreadSourcesWait: a wave whose figures could not all be read
// waits (the cells' gates for its processes, the edge gates for its
// routers — run, not dropped, though no router was read), and so does a
// gate whose only baseline could not be read; the events gates still
// judge.
func TestUnreadSourcesWait(t *testing.T) {
	cfg := DefaultConfig()
	full := Sample{Intake: Counts{1000, 0}, Refusals: Counts{1000, 0}, Inquiries: Counts{1000, 0},
		Routers: 1, Edge: Counts{1000, 0}, EdgeRefusals: Counts{1000, 0}}
	bases := []Baseline{{Name: BaselineOld, Sample: full}}
	wave := full
	wave.Routers, wave.EdgeUnread = 0, []string{"router at http://127.0.0.1:9080: connection refused"}
	vs := cfg.Judge(wave, bases)
	if len(vs) != 13 || vs[7].Gate != GateEdge5xx || vs[7].Decision != Wait || !strings.Contains(vs[7].Text, "connection refused") {
		t.Errorf("the routers unread: %d verdicts, %+v", len(vs), vs[7:])
	}
	if vs[0].Decision != Pass {
		t.Errorf("the cells' 5xx, read: %+v", vs[0])
	}
	wave = full
	wave.Unread = []string{"c1: metrics: cellkit_cell_deliveries_total is NaN, not a count"}
	vs = cfg.Judge(wave, bases)
	if vs[0].Decision != Wait || vs[7].Decision != Pass || vs[11].Decision != Pass {
		t.Errorf("a wave's process unread: %+v", vs)
	}
	unreadBase := full
	unreadBase.Unread = []string{"c2: timeout"}
	vs = cfg.Judge(full, []Baseline{{Name: BaselineOld, Sample: unreadBase}})
	if vs[0].Decision != Wait || !strings.Contains(vs[0].Text, "old release not read (c2: timeout)") {
		t.Errorf("the only baseline unread: %+v", vs[0])
	}
}
