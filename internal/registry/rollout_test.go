package registry

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRolloutWatch: without a record the state is "none"; a record's
// state, wave and time are exported as read; a record that cannot be
// read keeps the last state read and counts an error.
func TestRolloutWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map.json")
	reg, err := NewFile(FileConfig{Path: path}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	w := NewRolloutWatch(reg, RolloutWatchEvery, prometheus.WrapRegistererWithPrefix("cellkit_router_", metrics), nil)
	if w == nil {
		t.Fatal("no watch of a file registry")
	}
	ctx := context.Background()
	check := func(want string) {
		t.Helper()
		if err := testutil.GatherAndCompare(metrics, strings.NewReader(want), "cellkit_router_rollout_state", "cellkit_router_rollout_wave",
			"cellkit_router_rollout_waves", "cellkit_router_rollout_updated_timestamp_seconds", "cellkit_router_rollout_read_errors_total"); err != nil {
			t.Error(err)
		}
	}
	if err := w.Read(ctx); err != nil {
		t.Fatal(err)
	}
	check(rolloutMetrics("none", 0, 0, 0, 0))

	doc := DocumentFor(reg, "rollout")
	if err := doc.Put(ctx, []byte(`{"id":"r1","state":"halted","wave":0,"waves":[{"cells":["c1"]},{"cells":["c2"]}],"updated":"2026-12-02T10:00:00Z"}`), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Read(ctx); err != nil {
		t.Fatal(err)
	}
	check(rolloutMetrics("halted", 1, 2, 1.7962056e+09, 0))

	if err := os.WriteFile(path+".rollout", []byte(`{"rev":2,"doc":{"id":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.Read(ctx); err == nil {
		t.Fatal("a broken record read without an error")
	}
	check(rolloutMetrics("halted", 1, 2, 1.7962056e+09, 1))
}

func rolloutMetrics(state string, wave, waves int, updated float64, errors int) string {
	var b strings.Builder
	b.WriteString("# HELP cellkit_router_rollout_state 1 for the state of the registry's rollout record (none: no record), 0 for the others.\n# TYPE cellkit_router_rollout_state gauge\n")
	for _, s := range []string{"aborted", "done", "halted", "none", "paused", "rolled_back", "running"} {
		v := "0"
		if s == state {
			v = "1"
		}
		b.WriteString(`cellkit_router_rollout_state{state="` + s + `"} ` + v + "\n")
	}
	f := func(name, help, typ string, v float64) {
		b.WriteString("# HELP cellkit_router_" + name + " " + help + "\n# TYPE cellkit_router_" + name + " " + typ + "\n")
		b.WriteString("cellkit_router_" + name + " " + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
	}
	f("rollout_read_errors_total", "Reads of the registry's rollout record that failed (the last state read is kept).", "counter", float64(errors))
	f("rollout_updated_timestamp_seconds", "When the registry's rollout record last changed (Unix seconds; 0 without a record).", "gauge", updated)
	f("rollout_wave", "The wave the registry's rollout is at, from 1 (waves + 1 when every wave is out; 0 without a record).", "gauge", float64(wave))
	f("rollout_waves", "The waves of the registry's rollout.", "gauge", float64(waves))
	return b.String()
}
