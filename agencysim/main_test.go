package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// startRun runs run() on loopback ports chosen by the kernel and returns
// where it listens; stop cancels its context and returns run's error.
func startRun(t *testing.T, extra ...string) (a addrs, logs *testkit.Buffer, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs = &testkit.Buffer{}
	args := append([]string{
		"-nice-listen", "127.0.0.1:0", "-kcb-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0",
		"-latency-p50", "1ms", "-latency-p99", "5ms", "-shutdown-timeout", "5s",
	}, extra...)
	readyCh := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, logs, func(a addrs) { readyCh <- a }) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("run did not return 10 s after its context ended")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	select {
	case a = <-readyCh:
	case err := <-done:
		t.Fatalf("run() = %v before it was ready; logs:\n%s", err, logs)
	case <-time.After(10 * time.Second):
		t.Fatal("run not ready after 10 s")
	}
	return a, logs, stop
}

// call makes one real telegram call to the agency at addr.
func call(t *testing.T, p telegram.Profile, addr net.Addr, userKey string) telegram.Message {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	frame, err := p.AppendFrame(nil, &telegram.Message{Type: telegram.Request, TraceNo: 1, UserKey: userKey})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	body, err := p.NewReader(conn).ReadFrame()
	if err != nil {
		t.Fatalf("%s call: %v", p.Name, err)
	}
	var m telegram.Message
	if err := p.Decode(body, &m); err != nil {
		t.Fatalf("%s call: decode: %v", p.Name, err)
	}
	return m
}

func TestRunServesAndShutsDownCleanly(t *testing.T) {
	a, logs, stop := startRun(t)
	base := "http://" + a.Admin.String()

	if code := testkit.DoJSON(t, nil, http.MethodGet, base+"/healthz", nil, nil).Status; code != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", code)
	}
	var ready struct {
		Status   string            `json:"status"`
		Agencies map[string]string `json:"agencies"`
	}
	if code := testkit.DoJSON(t, nil, http.MethodGet, base+"/readyz", nil, &ready).Status; code != http.StatusOK || ready.Agencies["nice"] != a.NICE.String() {
		t.Errorf("GET /readyz = %d %+v, want 200 with nice at %s", code, ready, a.NICE)
	}

	for _, tt := range []struct {
		p    telegram.Profile
		addr net.Addr
	}{{telegram.NICE(), a.NICE}, {telegram.KCB(), a.KCB}} {
		m := call(t, tt.p, tt.addr, "U42")
		if m.Type != telegram.Response || m.RespCode != telegram.CodeOK || m.Score != agencysim.Score("U42") {
			t.Errorf("%s call = %+v, want 0210 0000 with score %d", tt.p.Name, m, agencysim.Score("U42"))
		}
	}

	var st agencysim.Stats
	if code := testkit.DoJSON(t, nil, http.MethodGet, base+"/v1/agencies/nice/stats", nil, &st).Status; code != http.StatusOK || st.Calls != 1 {
		t.Errorf("GET nice stats = %d %+v, want 200 with 1 call", code, st)
	}
	var cfg agencysim.Config
	if code := testkit.DoJSON(t, nil, http.MethodGet, base+"/v1/agencies/kcb/config", nil, &cfg).Status; code != http.StatusOK || cfg.MaxSessions != 40 || cfg.Latency.Dist != agencysim.DistLogNormal {
		t.Errorf("GET kcb config = %d %+v, want 200 with 40 sessions and log-normal latency", code, cfg)
	}
	if code := testkit.DoJSON(t, nil, http.MethodPatch, base+"/v1/agencies/kcb/config", `{"error_rate": 1}`, &cfg).Status; code != http.StatusOK || cfg.ErrorRate != 1 {
		t.Errorf("PATCH kcb config = %d %+v, want 200 with error rate 1", code, cfg)
	}
	if m := call(t, telegram.KCB(), a.KCB, "U42"); m.RespCode != agencysim.CodeAgencyError {
		t.Errorf("KCB call after the PATCH = %+v, want code %s", m, agencysim.CodeAgencyError)
	}
	var p agencysim.Problem
	if code := testkit.DoJSON(t, nil, http.MethodPut, base+"/v1/agencies/nice/config", `{"error_rate": "lots"}`, &p).Status; code != http.StatusBadRequest || p.Status != http.StatusBadRequest {
		t.Errorf("PUT a bad nice config = %d %+v, want a 400 problem", code, p)
	}
	var all []agencysim.Status
	if code := testkit.DoJSON(t, nil, http.MethodGet, base+"/v1/agencies", nil, &all).Status; code != http.StatusOK || len(all) != 2 {
		t.Errorf("GET /v1/agencies = %d %+v, want both agencies", code, all)
	}

	metrics := testkit.Do(t, nil, http.MethodGet, base+"/metrics", nil, nil).Body
	for _, want := range []string{`cellkit_agencysim_calls_total{agency="nice"} 1`, `cellkit_agencysim_errors_total{agency="kcb"} 1`, "go_goroutines"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("GET /metrics lacks %s", want)
		}
	}

	if err := stop(); err != nil {
		t.Fatalf("run() = %v after its context ended, want nil", err)
	}
	if _, err := net.DialTimeout("tcp", a.NICE.String(), time.Second); err == nil {
		t.Error("the NICE port still accepts after shutdown")
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("log line is not JSON: %s", line)
		}
	}
	if !strings.Contains(logs.String(), "shutting down") {
		t.Errorf("logs lack the shutdown line:\n%s", logs)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-error-rate", "2"},
		{"-latency-p50", "2s", "-latency-p99", "1s"},
		{"-nice-sessions", "-1"},
		{"-no-such-flag"},
		{"stray"},
		{"-admin-listen", "127.0.0.1:0", "-nice-listen", "127.0.0.1:0", "-kcb-listen", "256.0.0.1:0"},
	} {
		var out testkit.Buffer
		if err := run(context.Background(), args, &out, nil); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
	var out testkit.Buffer
	if err := run(context.Background(), []string{"-h"}, &out, nil); err != nil || !strings.Contains(out.String(), "-nice-listen") {
		t.Errorf("run(-h) = %v with output %q, want nil and the usage", err, out.String())
	}
}

func TestFlagsFromEnvironment(t *testing.T) {
	env := map[string]string{"CELLKIT_AGENCYSIM_NICE_SESSIONS": "5", "CELLKIT_SEED": "7", "CELLKIT_ERROR_RATE": "0.5"}
	getenv := func(k string) string { return env[k] }
	o, err := parseFlags([]string{"-seed", "3"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.niceSessions != 5 || o.seed != 3 || o.errorRate != 0.5 {
		t.Errorf("nice sessions %d, seed %d, error rate %g: want 5 and 0.5 from the environment, 3 from the flag", o.niceSessions, o.seed, o.errorRate)
	}
	env["CELLKIT_AGENCYSIM_KCB_SESSIONS"] = "forty"
	if _, err := parseFlags(nil, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), "CELLKIT_AGENCYSIM_KCB_SESSIONS") {
		t.Errorf("a bad variable: %v, want an error naming it", err)
	}
}
