package drill

import (
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/loadtest"
)

func TestScaleLatency(t *testing.T) {
	got, err := scaleLatency(agencyLatency{"dist": "lognormal", "p50": "50ms", "p99": "150ms"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got["p50"] != "500ms" || got["p99"] != "1.5s" || got["dist"] != "lognormal" {
		t.Errorf("scaleLatency = %v", got)
	}
}

// The kill drill's alert checks: the killed cell's down alert within its
// bounds passes; late, unresolved, missing, or another cell alerting fails.
func TestCheckCellDownAlert(t *testing.T) {
	const kill, ready = 10 * time.Second, 60 * time.Second
	down := func(firing, resolved time.Duration) AlertSeen {
		return AlertSeen{Name: "CellkitCellDown", Labels: map[string]string{"alertname": "CellkitCellDown", "cell": "c2"}, Pending: kill + time.Second, Firing: firing, Resolved: resolved}
	}
	other := AlertSeen{Name: "CellkitCellDown", Labels: map[string]string{"alertname": "CellkitCellDown", "cell": "c3"}, Pending: 20 * time.Second, Firing: 50 * time.Second, Resolved: -1}
	for _, tc := range []struct {
		name string
		seen []AlertSeen
		pass bool
	}{
		{"in time, resolved", []AlertSeen{down(kill+32*time.Second, ready+3*time.Second)}, true},
		{"fired late", []AlertSeen{down(kill+CellDownBound+time.Second, ready+3*time.Second)}, false},
		{"never resolved", []AlertSeen{down(kill+32*time.Second, -1)}, false},
		{"resolved late", []AlertSeen{down(kill+32*time.Second, ready+ResolveBound+time.Second)}, false},
		{"never fired", []AlertSeen{down(-1, ready)}, false},
		{"another cell alerted", []AlertSeen{down(kill+32*time.Second, ready+3*time.Second), other}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &loadtest.Verdict{Name: "kill"}
			checkCellDownAlert(d, tc.seen, "c2", kill, ready)
			d.Finish()
			if d.Pass != tc.pass {
				t.Errorf("pass = %v, want %v: %+v", d.Pass, tc.pass, d.Assertions)
			}
			if len(d.Notes) != len(tc.seen) {
				t.Errorf("notes %v: want one per alert seen", d.Notes)
			}
		})
	}
}
