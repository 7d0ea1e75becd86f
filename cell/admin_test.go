package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

// startRun runs the cell in process (run, as main calls it) with args
// after a working base (simulated agencies, a registry naming c1, loopback
// listeners, no NATS port) and returns the admin API's base URL once
// /healthz answers. The cell is stopped, and run must have returned nil,
// at cleanup.
func startRun(t *testing.T, args ...string) string {
	t.Helper()
	sim := agencysim.Config{MaxSessions: 4, Latency: agencysim.FixedLatency(time.Millisecond)}
	nice := celltest.StartSim(t, telegram.NICE(), sim)
	reg := celltest.NewRegistry(t, map[string]int{"nice": 2}, celltest.TestCell("c1"))
	admin := testkit.FreeAddr(t)
	args = append([]string{"--cell", "c1", "--registry", reg.URL(), "--store", t.TempDir(), "--agency", "nice=" + nice.Addr().String(),
		"--intake", testkit.FreeAddr(t), "--admin", admin, "--nats-port", "-1", "--log-level", "warn"}, args...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, func(string) string { return "" }, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run = %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not return within 30s of its context's end")
		}
	})
	base := "http://" + admin
	testkit.WaitFor(t, 30*time.Second, "the admin API to answer /healthz", func() bool {
		select {
		case err := <-done:
			t.Fatalf("run returned at start: %v", err)
		default:
		}
		r, err := testkit.Send(nil, http.MethodGet, base+"/healthz", nil, nil)
		return err == nil && r.Status == http.StatusOK
	})
	return base
}

// get is a GET of url with token as bearer token ("" for none).
func get(t *testing.T, url, token string) testkit.Response {
	t.Helper()
	h := map[string]string{}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	return testkit.Do(t, nil, http.MethodGet, url, nil, h)
}

func writeTokens(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAdminTokenFile: with --admin-token-file, everything but the probes
// needs one of the file's tokens (401 otherwise), and an edited file
// rotates the tokens without a restart: on change, and on SIGHUP.
func TestAdminTokenFile(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	writeTokens(t, tokens, "# operators\ntoken-old\n")
	admin := startRun(t, "--admin-token-file", tokens)

	for _, tc := range []struct {
		path, token string
		status      int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 0}, // open: 200 or 503, never 401
		{"/metrics", "", 401},
		{"/v1/admin/status", "", 401},
		{"/metrics", "wrong", 401},
		{"/v1/admin/status", "wrong", 401},
		{"/metrics", "token-old", 200},
		{"/v1/admin/status", "token-old", 200},
	} {
		r := get(t, admin+tc.path, tc.token)
		if tc.status == 0 && r.Status == http.StatusUnauthorized || tc.status != 0 && r.Status != tc.status {
			t.Errorf("GET %s (token %q) = %d %s, want %d", tc.path, tc.token, r.Status, r.Body, tc.status)
		}
		if r.Status == http.StatusUnauthorized {
			if p := r.Problem(t); p.Type != "https://cellkit.dev/problems/unauthorized" || !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("GET %s (token %q): problem %+v, WWW-Authenticate %q", tc.path, tc.token, p, r.Header.Get("WWW-Authenticate"))
			}
		}
	}

	// Rotation: the new token added, both work; the old one removed, only
	// the new one does.
	writeTokens(t, tokens, "token-old\ntoken-new\n")
	testkit.WaitFor(t, 10*time.Second, "the added token to be taken", func() bool {
		return get(t, admin+"/metrics", "token-new").Status == http.StatusOK
	})
	if r := get(t, admin+"/metrics", "token-old"); r.Status != http.StatusOK {
		t.Fatalf("the old token while both are in the file: %d %s", r.Status, r.Body)
	}
	writeTokens(t, tokens, "token-new\n")
	testkit.WaitFor(t, 10*time.Second, "the removed token to be refused", func() bool {
		return get(t, admin+"/v1/admin/status", "token-old").Status == http.StatusUnauthorized
	})
	if r := get(t, admin+"/v1/admin/status", "token-new"); r.Status != http.StatusOK {
		t.Fatalf("the new token after the old one was removed: %d %s", r.Status, r.Body)
	}

	// SIGHUP: a change the periodic look cannot see (same size, inode and
	// modification time) is taken only on the signal. The test's own
	// subscription keeps SIGHUP from ending the test binary before run's
	// handler is there.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	fi, err := os.Stat(tokens)
	if err != nil {
		t.Fatal(err)
	}
	writeTokens(t, tokens, "token-hup\n")
	if err := os.Chtimes(tokens, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the token rewritten in place to be taken on SIGHUP", func() bool {
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		return get(t, admin+"/metrics", "token-hup").Status == http.StatusOK
	})
	if r := get(t, admin+"/metrics", "token-new"); r.Status != http.StatusUnauthorized {
		t.Fatalf("the token replaced on SIGHUP: %d, want 401", r.Status)
	}
}

// TestAdminOpenOnLoopback: without a token file or client CA, the admin
// API on loopback is open, /metrics included (cellctl dev up's cells,
// scraped by the local Prometheus without a token).
func TestAdminOpenOnLoopback(t *testing.T) {
	admin := startRun(t)
	for _, path := range []string{"/healthz", "/metrics", "/v1/admin/status"} {
		if r := get(t, admin+path, ""); r.Status != http.StatusOK {
			t.Errorf("GET %s = %d %s, want 200", path, r.Status, r.Body)
		}
	}
}

// TestAdminOffLoopbackNeedsAuthentication: an admin listener other hosts
// can reach, without a token file or a client CA, stops the start with one
// line before anything is opened; with either, the flags are taken, and a
// token file over plain HTTP off loopback is warned about.
func TestAdminOffLoopbackNeedsAuthentication(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	base := []string{"--cell", "c1", "--agency", "nice=127.0.0.1:1", "--registry", "file:" + filepath.Join(dir, "map.json"),
		"--store", store, "--intake", testkit.FreeAddr(t)}
	noEnv := func(string) string { return "" }
	for _, admin := range []string{"0.0.0.0:0", ":9081", "[::]:0", "10.1.2.3:9081"} {
		err := run(context.Background(), append(base, "--admin", admin), noEnv, io.Discard)
		want := "--admin " + admin + " is not a loopback address and the admin API would be open to other hosts without authentication: set --admin-token-file or --admin-tls-client-ca, or listen on a loopback address"
		if err == nil || err.Error() != want {
			t.Errorf("run with --admin %s = %v, want %q", admin, err, want)
		}
	}
	// The environment counts like the command line.
	if err := run(context.Background(), base, func(k string) string { return map[string]string{"CELLKIT_CELL_ADMIN": "0.0.0.0:9081"}[k] }, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "0.0.0.0:9081 is not a loopback address") {
		t.Errorf("run with CELLKIT_CELL_ADMIN=0.0.0.0:9081 = %v", err)
	}
	if _, err := os.Stat(store); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the store dir was made (%v): the cell started before checking its admin listener", err)
	}
	// The old flag, a token on the command line, is gone.
	if err := run(context.Background(), append(base, "--admin-token", "s3cret"), noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "-admin-token") {
		t.Errorf("run with --admin-token = %v, want an undefined flag", err)
	}

	tokens := filepath.Join(dir, "tokens")
	writeTokens(t, tokens, "s3cret\n")
	certs := celltest.DevCerts(t)
	for _, auth := range [][]string{
		{"--admin-token-file", tokens},
		{"--admin-tls-cert", certs.Cert(pki.RoleCell), "--admin-tls-key", certs.Key(pki.RoleCell), "--admin-tls-client-ca", certs.CA()},
	} {
		if _, _, err := parseFlags(append(append(base, "--admin", "0.0.0.0:9081"), auth...), noEnv, io.Discard); err != nil {
			t.Errorf("parseFlags with --admin 0.0.0.0:9081 %q: %v", auth, err)
		}
	}

	// The warning comes before the cell opens anything: a store that
	// cannot be made (a file in its place) ends the run right after it,
	// before it listens on every interface.
	notDir := filepath.Join(dir, "not-a-dir")
	writeTokens(t, notDir, "")
	var log testkit.Buffer
	args := []string{"--cell", "c1", "--agency", "nice=127.0.0.1:1", "--registry", "file:" + filepath.Join(dir, "map.json"),
		"--store", filepath.Join(notDir, "store"), "--intake", testkit.FreeAddr(t), "--admin", "0.0.0.0:0", "--admin-token-file", tokens}
	if err := run(context.Background(), args, noEnv, &log); err == nil {
		t.Fatal("run with a file as its store's parent succeeded")
	}
	if !strings.Contains(log.String(), "admin bearer tokens cross the network in clear text") {
		t.Errorf("no warning about tokens over plain HTTP off loopback; log:\n%s", log.String())
	}
}
