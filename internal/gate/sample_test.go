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
	before := SampleOf(parse(t, scrapeBefore))
	if before.Intake != (Counts{108, 1}) || before.Inquiries != (Counts{93, 3}) || before.IntakeLatency.Count() != 108 {
		t.Fatalf("sample %+v", before)
	}
	after := SampleOf(parse(t, strings.NewReplacer(
		`code="202",route="post"} 100`, `code="202",route="post"} 300`,
		`code="500",route="post"} 1`, `code="500",route="post"} 21`,
		`outcome="done"} 90`, `outcome="done"} 250`,
		`step="pipeline"} 0`, `step="pipeline"} 2`,
		`route="post",le="+Inf"} 108`, `route="post",le="+Inf"} 328`,
	).Replace(scrapeBefore)))
	w := after.Since(before)
	if w.Intake != (Counts{220, 20}) || w.Inquiries != (Counts{160, 0}) || w.Panics != 2 || w.IntakeLatency.Count() != 220 {
		t.Fatalf("window %+v", w)
	}
	// A restart: the counters went down, the window counts what the new
	// process did.
	restarted := after.Since(SampleOf(parse(t, strings.ReplaceAll(scrapeBefore, `code="202",route="post"} 100`, `code="202",route="post"} 900`))))
	if restarted.Intake.Total != after.Intake.Total {
		t.Errorf("a restarted counter: %+v, want the new process's %d", restarted.Intake, after.Intake.Total)
	}
	sum := Sum(w, w)
	if sum.Intake != (Counts{440, 40}) || sum.IntakeLatency.Count() != 440 {
		t.Errorf("sum %+v", sum)
	}
	cfg := DefaultConfig()
	vs := cfg.Judge(w, Sample{Intake: Counts{2000, 2}, Inquiries: Counts{1800, 1}})
	if Overall(vs) != Fail || vs[0].Decision != Fail {
		t.Errorf("a wave failing 9%% of its POSTs: %+v", vs)
	}
}
