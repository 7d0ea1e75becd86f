package drill

import "testing"

func TestScaleLatency(t *testing.T) {
	got, err := scaleLatency(agencyLatency{"dist": "lognormal", "p50": "50ms", "p99": "150ms"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got["p50"] != "500ms" || got["p99"] != "1.5s" || got["dist"] != "lognormal" {
		t.Errorf("scaleLatency = %v", got)
	}
}
