package drill

import (
	"net/http"
	"testing"
)

// countingTripper counts the requests it is given and answers none.
type countingTripper struct{ n int }

func (c *countingTripper) RoundTrip(*http.Request) (*http.Response, error) {
	c.n++
	return nil, http.ErrNotSupported
}

// TestMixedSendsItsShareOnNewConnections: the handoff drill's client
// sends the share asked of its requests on new connections, spread over
// the run, the rest on kept-alive ones.
func TestMixedSendsItsShareOnNewConnections(t *testing.T) {
	for _, share := range []float64{0.5, 0.1, 1} {
		kept, fresh := &countingTripper{}, &countingTripper{}
		m := &mixed{kept: kept, fresh: fresh, share: share}
		req, _ := http.NewRequest("GET", "http://x/", nil)
		for i := 0; i < 100; i++ {
			_, _ = m.RoundTrip(req)
			if want := int(float64(i+1) * share); fresh.n != want {
				t.Fatalf("share %g: after %d requests %d on new connections, want %d", share, i+1, fresh.n, want)
			}
		}
		if kept.n+fresh.n != 100 {
			t.Fatalf("share %g: %d + %d requests of 100", share, kept.n, fresh.n)
		}
	}
}
