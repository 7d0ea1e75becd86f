package program

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/adminauth"
	"github.com/cellkit/cellkit/internal/reload"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func TestStart(t *testing.T) {
	var buf testkit.Buffer
	log, reg := Start(&buf, 0)
	log.Debug("hidden")
	log.Info("shown", "k", "v")
	if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, `"msg":"shown","k":"v"`) {
		t.Fatalf("log %q: want JSON lines at info and above", s)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	if !names["go_goroutines"] || !names["process_cpu_seconds_total"] {
		t.Fatalf("registry holds %d families without the Go and process collectors' ones", len(mfs))
	}
	if reg == prometheus.DefaultRegisterer {
		t.Fatal("the global registry")
	}
}

// Bearer tokens on a listener without a certificate are warned about
// unless the listener is on loopback.
func TestAdminGuardWarnsOfTokensInClearText(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("a-token-of-thirty-two-bytes-or-more-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		listen  string
		tls     bool
		file    string
		warning bool
	}{
		{"10.0.0.1:9080", false, tokens, true},
		{"127.0.0.1:9080", false, tokens, false},
		{"10.0.0.1:9080", true, tokens, false},
		{"10.0.0.1:9080", false, "", false},
	} {
		var buf testkit.Buffer
		g, err := AdminGuard(adminauth.Config{TokenFile: tc.file}, tc.listen, tc.tls, buf.Logger(0), prometheus.NewRegistry())
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if got := strings.Contains(buf.String(), "clear text"); got != tc.warning || g.Enabled() != (tc.file != "") {
			t.Errorf("%+v: warned %v, enabled %v", tc, got, g.Enabled())
		}
	}
}

// Watch reloads a changed file on SIGHUP, before its interval, and ends
// with its context.
func TestWatchReloadsOnSIGHUP(t *testing.T) {
	// SIGHUP never ends this test binary, even before Watch listens.
	hup := make(chan os.Signal, 16)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	var loads atomic.Int32
	w := reload.New([]string{path}, func() error { loads.Add(1); return nil },
		reload.Config{What: "f", Interval: time.Hour}, reload.Options{Registerer: prometheus.NewRegistry()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Watch(ctx, []*reload.Watcher{w, nil}) }()
	testkit.WaitFor(t, 5*time.Second, "a reload on SIGHUP", func() bool {
		_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
		time.Sleep(20 * time.Millisecond)
		return loads.Load() > 0
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not end with its context")
	}
}
