package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/registry"
)

func TestLoadMeasuresAnOpenLoop(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != "k" || r.URL.Path != "/v1/inquiries" {
			w.WriteHeader(http.StatusForbidden)
		}
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	res, err := load(context.Background(), loadOptions{name: "t", targets: []string{srv.URL}, key: "k",
		rate: 500, duration: 400 * time.Millisecond, warmup: 100 * time.Millisecond, conns: 4, users: 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 250 || res.Measured != 200 || res.Errors != 0 || res.Non2xx != 0 || res.P50 <= 0 || res.P99 < res.P50 || res.Max < res.P99 {
		t.Fatalf("load = %+v", res)
	}
}

func TestBurstSendsAFixedNumber(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	res, err := burst(context.Background(), loadOptions{targets: []string{srv.URL}, key: "k", requests: 1003, conns: 8, users: 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1003 || res.Measured != 1003 || res.Errors != 0 || served.Load() != 1003 || res.Rate <= 0 {
		t.Fatalf("burst = %+v, served %d; want 1003 sent and served", res, served.Load())
	}
}

func TestLoadCountsRefusals(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	res, err := load(context.Background(), loadOptions{targets: []string{srv.URL}, rate: 200, duration: 200 * time.Millisecond, conns: 2, users: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Non2xx != res.Measured || res.Measured == 0 {
		t.Fatalf("load = %+v, want every answer counted as non-2xx", res)
	}
}

func TestMkmap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map.json")
	if err := mkmap(context.Background(), path, []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, 0); err != nil {
		t.Fatal(err)
	}
	reg, _ := registry.NewFile(registry.FileConfig{Path: path}, registry.Options{})
	m, err := reg.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ids := m.ActiveCells(); len(ids) != 2 || ids[0] != "c1" || ids[1] != "c2" {
		t.Fatalf("cells %v", ids)
	}
}

// TestChurn: every change is a new version with the cell's weight turned
// over, and three cells share two backends.
func TestChurn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map.json")
	ctx := context.Background()
	if err := mkmap(ctx, path, []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, 3); err != nil {
		t.Fatal(err)
	}
	n, err := churn(ctx, path, "c2", time.Millisecond, time.Minute, 3)
	if err != nil || n != 3 {
		t.Fatalf("churn = %d, %v; want the 3 changes asked for", n, err)
	}
	reg, _ := registry.NewFile(registry.FileConfig{Path: path}, registry.Options{})
	m, err := reg.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := m.Cell("c2")
	if m.Version() != int64(4+n) || c.Weight != 1+n%2 {
		t.Fatalf("after %d changes: version %d, c2 weight %d", n, m.Version(), c.Weight)
	}
	if c3, _ := m.Cell("c3"); c3.Intake != "http://127.0.0.1:1" {
		t.Fatalf("c3's intake %s, want the first backend again", c3.Intake)
	}
	if _, err := churn(ctx, path, "c9", time.Millisecond, time.Minute, 1); err == nil {
		t.Fatal("churn of an unknown cell went on")
	}
}
