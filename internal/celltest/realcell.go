package celltest

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/testkit"
)

// A RealCell is a cell process, started from the cell program built for
// the test binary: what cellctl, the Terraform provider and the drills
// meet in life (a package that tests them does not import the cell).
type RealCell struct {
	Intake, Admin string // base URLs
	Log           *bytes.Buffer
	stop          func()
}

// Stop ends the cell as the test's end would (SIGTERM, then SIGKILL
// after 20 s) and waits for it: a cell that is down.
func (c *RealCell) Stop() { c.stop() }

// CellProcess is how StartCell runs a cell.
type CellProcess struct {
	ID, Registry  string // the cell's id and the registry's URL
	Intake, Admin string // listen addresses (testkit.FreeAddr)
	Nice, KCB     string // the agency simulators' addresses
	// Certs, if not nil, puts both listeners on mutual TLS with the cell's
	// certificate; readiness is then asked with the operator's.
	Certs *Certs
	// Extra are more flags.
	Extra []string
}

var (
	cellOnce sync.Once
	cellBin  string
	cellErr  error
)

// CellBinary builds the cell program once for the test binary and returns
// its path. Built, not this test binary run as the cell: the cell's main
// is in package main, which the packages using celltest cannot import.
func CellBinary(t testing.TB) string {
	t.Helper()
	cellOnce.Do(func() {
		dir, err := os.MkdirTemp("", "celltest-cell-")
		if err != nil {
			cellErr = err
			return
		}
		cellBin = filepath.Join(dir, "cell")
		_, file, _, _ := runtime.Caller(0)
		cmd := exec.Command("go", "build", "-o", cellBin, "./cell")
		cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			cellErr = fmt.Errorf("go build ./cell: %v\n%s", err, out)
		}
	})
	if cellErr != nil {
		t.Fatal(cellErr)
	}
	return cellBin
}

// StartCell runs a cell process with two workers and 1 ms steps, waits
// until it is ready, and stops it (SIGTERM, then SIGKILL after 20 s) when
// the test ends, showing its log if the test failed.
func StartCell(t testing.TB, p CellProcess) *RealCell {
	t.Helper()
	scheme, ready := "http", http.DefaultClient
	args := []string{"--cell", p.ID, "--registry", p.Registry, "--store", t.TempDir(),
		"--intake", p.Intake, "--admin", p.Admin, "--nats-port", "-1",
		"--agency", "nice=" + p.Nice, "--agency", "kcb=" + p.KCB,
		"--workers", "2", "--css-latency", "1ms", "--core-latency", "1ms", "--log-level", "warn"}
	if p.Certs != nil {
		cert, key := p.Certs.Cert(pki.RoleCell), p.Certs.Key(pki.RoleCell)
		args = append(args, "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", p.Certs.CA(),
			"--admin-tls-cert", cert, "--admin-tls-key", key, "--admin-tls-client-ca", p.Certs.CA())
		scheme, ready = "https", p.Certs.TLSClient(t, pki.RoleOperator)
	}
	args = append(args, p.Extra...)
	c := &RealCell{Intake: scheme + "://" + p.Intake, Admin: scheme + "://" + p.Admin, Log: &bytes.Buffer{}}
	cmd := exec.Command(CellBinary(t), args...)
	// The cell reads CELLKIT_* variables: keep the developer's out.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CELLKIT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = c.Log, c.Log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	c.stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			t.Logf("cell %s log:\n%s", p.ID, c.Log)
		}
	})
	testkit.WaitFor(t, 30*time.Second, "cell "+p.ID+" to be ready", func() bool {
		select {
		case <-exited:
			t.Fatalf("cell %s exited: %v\n%s", p.ID, cmd.ProcessState, c.Log)
		default:
		}
		resp, err := ready.Get(c.Admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return c
}

// RemoveCellBinary removes what CellBinary built: a TestMain calls it once
// the tests are done.
func RemoveCellBinary() {
	if cellBin != "" {
		_ = os.RemoveAll(filepath.Dir(cellBin))
	}
}

// VerifyTestMain is testkit.VerifyTestMain for a package whose tests run
// cell processes: it removes what CellBinary built once they are done.
func VerifyTestMain(m *testing.M, extra ...goleak.Option) {
	testkit.VerifyTestMain(m, append(extra, goleak.Cleanup(func(code int) {
		RemoveCellBinary()
		os.Exit(code)
	}))...)
}
