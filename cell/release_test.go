package main

import (
	"io"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/api"
)

// TestReleaseIsTheSameOnEveryInstance: the instances of a cell, and the
// cells of a stack, run one release although their ids, addresses,
// stores, NATS and certificate files differ; a flag that changes what the
// cell does makes another.
func TestReleaseIsTheSameOnEveryInstance(t *testing.T) {
	release := func(args ...string) string {
		t.Helper()
		_, x, err := parseFlags(args, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return x.release.ID
	}
	instance := func(cell, in, host string, extra ...string) string {
		return release(append([]string{"--cell", cell, "--instance", in, "--registry", "consul://10.0.0.2:8500/cellkit",
			"--store", "/var/cells/" + cell + "-" + in, "--intake", host + ":8081", "--admin", host + ":9081",
			"--admin-token-file", "/etc/" + in + "/token", "--nats-url", "nats://" + host + ":4222",
			"--nats-token-file", "/etc/" + in + "/nats", "--agency", "nice=10.0.0.9:7001",
			"--tls-cert", "/etc/" + in + "/cert.pem", "--tls-key", "/etc/" + in + "/key.pem"}, extra...)...)
	}
	i1 := instance("c1", "i1", "10.0.1.1")
	for _, other := range []string{instance("c1", "i2", "10.0.1.2"), instance("c2", "i1", "10.0.2.1")} {
		if other != i1 {
			t.Errorf("another instance or cell: release %s, want %s", other, i1)
		}
	}
	if lb := instance("c1", "i3", "10.0.1.3", "--lane-blind"); lb == i1 {
		t.Errorf("--lane-blind runs the same release %s", lb)
	}
	if w := instance("c1", "i3", "10.0.1.3", "--workers", "8"); w == i1 {
		t.Errorf("--workers 8 runs the same release %s", w)
	}
}

// TestReleaseIsReported: a running cell reports its release in its admin
// status and as cellkit_build_info, the same in both.
func TestReleaseIsReported(t *testing.T) {
	admin := startRun(t, "--workers", "3")
	var st api.CellStatus
	get(t, admin+"/v1/admin/status", "").JSON(t, &st)
	if !strings.HasPrefix(st.Release.ID, st.Release.Version+"@") || len(st.Release.Binary) != 12 || len(st.Release.Config) != 12 {
		t.Fatalf("status release %+v", st.Release)
	}
	m := string(get(t, admin+"/metrics", "").Body)
	want := `release="` + st.Release.ID + `"`
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, "cellkit_build_info{") && strings.Contains(line, `program="cell"`) && strings.Contains(line, want) && strings.HasSuffix(line, " 1") {
			return
		}
	}
	t.Errorf("no cellkit_build_info{program=\"cell\", %s} 1 in /metrics", want)
}
