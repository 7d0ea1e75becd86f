package adminclient

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMetricsOverTheBound: a scrape over MaxBody is an error, not the
// first MaxBody bytes read as a scrape. Cut at a line's end, the scrape
// below still parses, without its 5xx series: the gates would judge a
// cell that failed 7 requests as one that failed none. A scrape of
// exactly MaxBody is read whole.
func TestMetricsOverTheBound(t *testing.T) {
	ok := "cellkit_cell_intake_requests_total{code=\"202\"} 100\n"
	failed := "cellkit_cell_intake_requests_total{code=\"500\"} 7\n"
	head := "# TYPE cellkit_cell_intake_requests_total counter\n"
	// The first MaxBody bytes end with the 202 series' line.
	body := head + strings.Repeat("#", MaxBody-len(head)-len(ok)-1) + "\n" + ok
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	defer srv.Close()
	c := Client{HTTP: srv.Client()}

	mfs, err := c.Metrics(context.Background(), srv.URL)
	if err != nil || len(mfs["cellkit_cell_intake_requests_total"].GetMetric()) != 1 {
		t.Fatalf("a scrape of MaxBody bytes: %v, %v", mfs, err)
	}
	body += failed
	mfs, err = c.Metrics(context.Background(), srv.URL)
	if err == nil || !strings.Contains(err.Error(), "over 8388608 bytes") {
		t.Errorf("a scrape over MaxBody: %d series read (%v), want an error", len(mfs["cellkit_cell_intake_requests_total"].GetMetric()), err)
	}
}
