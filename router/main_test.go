package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/testkit"
)

// The test binary is also the router, for the tests that run it as a
// process (testkit.Program).
func TestMain(m *testing.M) {
	testkit.RunAsProgram("router", main)
	testkit.VerifyTestMain(m)
}

func TestKeygen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	var keys []string
	for _, client := range []string{"dev", "platform-b"} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{"keygen", "-client", client, "-rate", "50", "-burst", "100", "-keys", path}, &out, &errOut, nil); err != nil {
			t.Fatalf("keygen: %v (%s)", err, errOut.String())
		}
		keys = append(keys, strings.TrimSpace(out.String()))
	}
	k, err := apikey.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Clients()) != 2 {
		t.Fatalf("%d clients in the keys file, want 2", len(k.Clients()))
	}
	info, _ := os.Stat(path)
	if info.Mode().Perm()&0o077 != 0 {
		t.Errorf("keys file mode %v, want private", info.Mode())
	}
	data, _ := os.ReadFile(path)
	for _, key := range keys {
		if strings.Contains(string(data), key) {
			t.Errorf("the keys file holds the key itself")
		}
	}
	// Without -keys: the entry goes to stderr for a human to paste.
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"keygen", "-client", "x"}, &out, &errOut, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), apikey.Hash(strings.TrimSpace(out.String()))) {
		t.Errorf("stderr %q lacks the key's hash", errOut.String())
	}
	if err := run(context.Background(), []string{"keygen"}, &out, &errOut, nil); err == nil {
		t.Error("keygen without -client succeeded")
	}
}

func TestFlagsFromEnvironment(t *testing.T) {
	env := map[string]string{
		"CELLKIT_ROUTER_LISTEN":              "127.0.0.1:9999",
		"CELLKIT_ROUTER_CELL_MAX_CONCURRENT": "7",
		"CELLKIT_ROUTER_KEYS":                "/from/env",
		"CELLKIT_REGISTRY":                   "file:/from/env.json",
	}
	getenv := func(k string) string { return env[k] }
	o, err := parseFlags([]string{"-keys", "/from/flag"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.listen != "127.0.0.1:9999" || o.cell.MaxConcurrent != 7 || o.keysPath != "/from/flag" || o.registryURL != "file:/from/env.json" {
		t.Errorf("listen %q, max %d, keys %q, registry %q: want env for all but keys", o.listen, o.cell.MaxConcurrent, o.keysPath, o.registryURL)
	}
	env["CELLKIT_ROUTER_CELL_MAX_CONCURRENT"] = "many"
	if _, err := parseFlags(nil, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), "CELLKIT_ROUTER_CELL_MAX_CONCURRENT") {
		t.Errorf("bad env value: %v", err)
	}
}

// TestRunWaitsForTheMapThenServesAndShutsDown runs the program against a
// real file registry that holds no map at first.
func TestRunWaitsForTheMapThenServesAndShutsDown(t *testing.T) {
	dir := t.TempDir()
	regPath := filepath.Join(dir, "map.json")
	keysPath := filepath.Join(dir, "keys.json")
	var keyOut bytes.Buffer
	if err := run(context.Background(), []string{"keygen", "-client", "dev", "-keys", keysPath}, &keyOut, io.Discard, nil); err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(keyOut.String())

	cell := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"c1-1"}`)
	}))
	defer cell.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testkit.Buffer{}
	readyCh := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{
			"-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-registry", "file:" + regPath,
			"-keys", keysPath, "-map-cache", filepath.Join(dir, "cache.json"), "-shutdown-timeout", "5s",
			"-shutdown-delay", "2s",
		}, io.Discard, logs, func(a addrs) { readyCh <- a })
	}()
	select {
	case <-readyCh:
		t.Fatal("serving before there is a cell map")
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs)
	case <-time.After(300 * time.Millisecond): // the registry is polled every 100 ms
	}

	publishMap(t, regPath, cell.URL)
	var a addrs
	select {
	case a = <-readyCh:
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs)
	case <-time.After(10 * time.Second):
		t.Fatalf("not serving 10 s after the map appeared\n%s", logs)
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	req, _ := http.NewRequest("POST", "http://"+a.Public.String()+"/v1/inquiries", strings.NewReader(`{"user_id":"u1"}`))
	req.Header.Set("X-API-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Cellkit-Cell") != "c1" {
		t.Fatalf("POST: %d %v", resp.StatusCode, resp.Header)
	}
	resp, err = client.Get("http://" + a.Admin.String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var rd api.RouterReadiness
	json.NewDecoder(resp.Body).Decode(&rd)
	resp.Body.Close()
	if resp.StatusCode != 200 || !rd.Ready || rd.MapVersion != 2 {
		t.Errorf("readyz %d %+v", resp.StatusCode, rd)
	}
	// It announced itself in the registry, with its admin URL, for cellctl.
	reg, err := registry.NewFile(registry.FileConfig{Path: regPath}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	as, err := reg.Routers(context.Background())
	if err != nil || len(as) != 1 || as[0].Admin != "http://"+a.Admin.String() {
		t.Errorf("routers announced: %+v, %v; want this one at http://%s", as, err, a.Admin)
	}

	// A stop first fails readiness and goes on serving for the delay.
	cancel()
	testkit.WaitFor(t, time.Second, "readiness to fail at the stop", func() bool {
		r, err := testkit.Send(client, "GET", "http://"+a.Admin.String()+"/readyz", nil, nil)
		return err == nil && r.Status == http.StatusServiceUnavailable && strings.Contains(string(r.Body), "stopping")
	})
	req, _ = http.NewRequest("POST", "http://"+a.Public.String()+"/v1/inquiries", strings.NewReader(`{"user_id":"u2"}`))
	req.Header.Set("X-API-Key", key)
	if resp, err := client.Do(req); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST while stopping: %v %v, want still served", resp, err)
	} else {
		resp.Body.Close()
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v\n%s", err, logs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if _, err := os.Stat(filepath.Join(dir, "cache.json")); err != nil {
		t.Errorf("no map cache written: %v", err)
	}
	if as, err := reg.Routers(context.Background()); err != nil || len(as) != 0 {
		t.Errorf("routers announced after shutdown: %+v, %v; want it withdrawn", as, err)
	}
	for _, want := range []string{`"msg":"router ready"`, `"msg":"shutting down"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
}

func TestRunNeedsKeys(t *testing.T) {
	err := run(context.Background(), []string{"-registry", "file:" + filepath.Join(t.TempDir(), "m.json")}, io.Discard, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "keys") {
		t.Fatalf("run without keys: %v", err)
	}
}
