package cellctl

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// TestRefusals checks every kind of bad input, against each
// registry: the exit status, one line on stderr saying why, and a map left
// byte-identical.
func TestRefusals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		// c1 active, c2 drained: c1 is the last active cell.
		e.setup([]string{"c1", "c2"}, nil)
		e.ok("drain", "c2", "--force", "--leave-data")
		e.ok("quota", "set", "kcb", "c1", "30")

		for _, tc := range []struct {
			name string
			args []string
			code int
			want string // in the one line on stderr
		}{
			{"unknown cell drain", []string{"drain", "c9"}, ExitFailure, `refused: unknown cell "c9" (cells: c1, c2)`},
			{"unknown cell weight", []string{"weight", "c9", "2"}, ExitFailure, `unknown cell "c9"`},
			{"unknown cell undrain", []string{"undrain", "c9"}, ExitFailure, `unknown cell "c9"`},
			{"unknown cell quota", []string{"quota", "set", "nice", "c9", "3"}, ExitFailure, `unknown cell "c9"`},
			{"unknown cell override", []string{"override", "set", "u1", "c9"}, ExitFailure, `unknown cell "c9"`},
			{"last active cell", []string{"drain", "c1"}, ExitFailure, `refused: cannot drain "c1": it is the last active cell`},
			{"last active cell dry run", []string{"drain", "c1", "--dry-run"}, ExitFailure, "it is the last active cell"},
			{"quota over limit", []string{"quota", "set", "nice", "c1", "81"}, ExitFailure, `quota 81 for "nice" must be in 0..80 (the agency's session limit)`},
			{"limit under fixed quotas", []string{"quota", "limit", "kcb", "20"}, ExitFailure, `fixed quotas sum to 30, over its session limit 20`},
			{"unknown agency", []string{"quota", "set", "equifax", "c1", "3"}, ExitFailure, `unknown agency "equifax"`},
			{"weight zero", []string{"weight", "c1", "0"}, ExitFailure, `weight 0 must be in 1..1000000`},
			{"weight negative", []string{"weight", "c1", "-3"}, ExitFailure, `weight -3 must be in 1..1000000`},
			{"provision weight zero", []string{"provision", "c3", "--intake", "http://h:1", "--admin", "http://h:2", "--weight", "0"}, ExitFailure, "weight 0 must be in 1..1000000"},
			{"malformed intake url", []string{"provision", "c3", "--intake", "ftp://h:1", "--admin", "http://h:2"}, ExitFailure, `--intake: url "ftp://h:1" must be http:// or https://`},
			{"url without host", []string{"provision", "c3", "--intake", "http://h:1", "--admin", "http://"}, ExitFailure, `--admin: url "http://" has no host`},
			{"url bad port", []string{"provision", "c3", "--intake", "http://h:99999", "--admin", "http://h:2"}, ExitFailure, `has a bad port`},
			{"url not parseable", []string{"provision", "c3", "--intake", "http://h:1", "--admin", "http://[::1"}, ExitFailure, `is malformed`},
			{"endpoints malformed url", []string{"endpoints", "c1", "--admin", "h:2"}, ExitFailure, `--admin: url "h:2"`},
			{"duplicate cell id", []string{"provision", "c1", "--intake", "http://h:1", "--admin", "http://h:2"}, ExitFailure, `refused: duplicate cell id "c1"`},
			{"duplicate drained cell id", []string{"provision", "c2", "--intake", "http://h:1", "--admin", "http://h:2"}, ExitFailure, `duplicate cell id "c2"`},
			{"bad cell id", []string{"provision", "C3", "--intake", "http://h:1", "--admin", "http://h:2"}, ExitFailure, `cell id "C3" must be 1-32 of [a-z0-9-]`},
			{"override to drained cell", []string{"override", "set", "u1", "c2"}, ExitFailure, `refused: cannot pin user "u1" to drained cell "c2"`},
			{"bad user id", []string{"override", "set", "u 1", "c1"}, ExitFailure, `user id "u 1" must be`},
			{"clear missing override", []string{"override", "clear", "nobody"}, ExitFailure, `no override for user "nobody"`},
			{"remove active cell", []string{"remove", "c1"}, ExitFailure, `cell "c1" is active: drain it before removing it`},
			{"undrain active cell", []string{"undrain", "c1"}, ExitFailure, `cell "c1" is already active`},
			{"init over a map", []string{"init", "--agency", "nice=1"}, ExitFailure, "already holds map version 6 with 2 cells; --force replaces it"},
			// Usage errors: exit 2, nothing read or written.
			{"weight not a number", []string{"weight", "c1", "x"}, ExitUsage, `weight "x" is not a whole number`},
			{"missing argument", []string{"drain"}, ExitUsage, "want CELL, got 0 arguments (see 'cellctl help drain')"},
			{"extra argument", []string{"undrain", "c1", "c2"}, ExitUsage, "want CELL, got 2 arguments"},
			{"unknown flag", []string{"drain", "c1", "--now"}, ExitUsage, "flag provided but not defined: -now"},
			{"missing urls", []string{"provision", "c3"}, ExitUsage, "--intake URL and --admin URL are required"},
			{"bad agency flag", []string{"init", "--agency", "nice"}, ExitUsage, "want NAME=SESSIONS"},
			{"unknown command", []string{"drian", "c1"}, ExitUsage, `unknown command "drian"`},
			{"unknown subcommand", []string{"override", "pin", "u1"}, ExitUsage, "want one of: set, clear, list"},
			{"wait and force", []string{"drain", "c1", "--wait", "--force"}, ExitUsage, "--wait and --force exclude each other"},
			{"console open to the network", []string{"console", "--listen", "0.0.0.0:7480"}, ExitUsage, "--listen 0.0.0.0:7480 is not a loopback address: serve the console over TLS"},
			{"console listen", []string{"console", "--listen", "localhost"}, ExitUsage, `--listen "localhost": want HOST:PORT`},
			{"console interval", []string{"console", "--interval", "1ms"}, ExitUsage, "--interval 1ms: at least 100ms"},
			{"console token file missing", []string{"console", "--token-file", "/nonexistent/token"}, ExitUsage, "--token-file: open /nonexistent/token"},
			{"console trust-admin", []string{"console", "--trust-admin", "ftp://127.0.0.1:1"}, ExitUsage, `--trust-admin: "ftp://127.0.0.1:1": want an admin API's base URL, http(s)://HOST:PORT`},
		} {
			t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
				before := e.raw()
				r := e.run(tc.args...)
				if r.code != tc.code {
					t.Errorf("exit %d, want %d\n%v", r.code, tc.code, r)
				}
				if !strings.Contains(r.stderr, tc.want) {
					t.Errorf("stderr %q, want it to contain %q", r.stderr, tc.want)
				}
				if n := strings.Count(r.stderr, "\n"); n != 1 {
					t.Errorf("stderr has %d lines, want one:\n%s", n, r.stderr)
				}
				if tc.code == ExitFailure && tc.args[0] != "init" && !strings.Contains(r.stderr, "; the map is unchanged (version 6)") {
					t.Errorf("stderr %q does not say the map is unchanged", r.stderr)
				}
				if after := e.raw(); !bytes.Equal(before, after) {
					t.Errorf("the map changed:\nbefore %.200s\nafter  %.200s", before, after)
				}
			})
		}
	})
}

// TestRegistryUnreachable: a registry that cannot be reached is named,
// with what to check, and the exit status is 1; no registry at all is a
// usage error.
func TestRegistryUnreachable(t *testing.T) {
	cli := &CLI{Getenv: func(string) string { return "" }}
	run := func(args ...string) result {
		var out, errw bytes.Buffer
		code := cli.Run(context.Background(), args, &out, &errw)
		return result{args: args, stdout: out.String(), stderr: errw.String(), code: code}
	}
	for _, args := range [][]string{
		{"status"},
		{"map", "show"},
		{"verify"},
		{"drain", "c1"},
		{"provision", "c1", "--intake", "http://h:1", "--admin", "http://h:2"},
		{"init", "--agency", "nice=1"},
	} {
		r := run(append([]string{"--registry", "consul://127.0.0.1:1/cellkit", "--timeout", "5s"}, args...)...)
		if r.code != ExitFailure || !strings.Contains(r.stderr, "registry consul://127.0.0.1:1/cellkit cannot be reached") ||
			!strings.Contains(r.stderr, "connection refused") || !strings.Contains(r.stderr, "CELLKIT_REGISTRY") {
			t.Errorf("%v", r)
		}
	}
	r := run("status")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "no registry: pass --registry URL or set CELLKIT_REGISTRY") {
		t.Errorf("without a registry: %v", r)
	}
	r = run("--registry", "etcd://h:1/x", "status")
	if r.code != ExitUsage || !strings.Contains(r.stderr, `unknown scheme "etcd"`) {
		t.Errorf("unknown registry scheme: %v", r)
	}
	// The environment variable is used when there is no flag.
	cli.Getenv = func(k string) string {
		if k == registry.EnvRegistry {
			return "consul://127.0.0.1:1/from-env"
		}
		return ""
	}
	r = run("status")
	if r.code != ExitFailure || !strings.Contains(r.stderr, "consul://127.0.0.1:1/from-env") {
		t.Errorf("registry from the environment: %v", r)
	}
	e := newFileEnv(t)
	r = e.run("status")
	if r.code != ExitFailure || !strings.Contains(r.stderr, "holds no map yet: create one with 'cellctl init'") {
		t.Errorf("empty registry: %v", r)
	}
}

// TestConcurrentProvision: provisions racing each other all end up in the
// map (the writer lock serialises them; none overwrites another).
func TestConcurrentProvision(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.ok("init", "--agency", "nice=80", "--slots", "4096")
		ids := []string{"c1", "c2", "c3"}
		results := make([]result, len(ids))
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() {
				results[i] = e.run("provision", id, "--intake", "http://10.0.0.1:8081", "--admin", "http://10.0.0.1:9081", "--leave-data")
			})
		}
		wg.Wait()
		for _, r := range results {
			if r.code != 0 {
				t.Errorf("%v", r)
			}
		}
		m := e.load()
		if got := m.ActiveCells(); len(got) != 3 || m.Version() != 4 {
			t.Errorf("after 3 concurrent provisions: version %d, active cells %v; want 4, [c1 c2 c3]", m.Version(), got)
		}
		if v := verify(m, 0); !v.OK {
			t.Errorf("verify after concurrent provisions: %+v", v.Checks)
		}
	})
}

// racer is a registry whose first CompareAndSwap loses to another writer
// that slips in (as a writer that ignores the lock would).
type racer struct {
	registry.Registry
	mu    sync.Mutex
	races int // how many CAS calls lose
	cut   func(ctx context.Context, r registry.Registry) error
}

func (r *racer) CompareAndSwap(ctx context.Context, old int64, m *slotmap.Map) error {
	r.mu.Lock()
	race := r.races > 0
	if race {
		r.races--
	}
	r.mu.Unlock()
	if race {
		if err := r.cut(ctx, r.Registry); err != nil {
			return err
		}
	}
	return r.Registry.CompareAndSwap(ctx, old, m)
}

// TestReplan: a change that loses its compare-and-swap is planned again
// against the new map and keeps the other writer's change; after 3 lost
// re-plans it gives up without writing.
func TestReplan(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.setup([]string{"c1", "c2"}, nil)
		// The intruder pins a user: a change that moves no slot.
		n := 0
		cut := func(ctx context.Context, reg registry.Registry) error {
			m, err := reg.Load(ctx)
			if err != nil {
				return err
			}
			n++
			p, err := m.SetOverride("intruder-"+itoa(n), "c1")
			if err != nil {
				return err
			}
			return reg.CompareAndSwap(ctx, m.Version(), p.After)
		}
		r := &racer{races: 1, cut: cut}
		e.cli.OpenRegistry = func(url string) (registry.Registry, error) {
			reg, err := registry.Open(registry.Config{URL: url}, registry.Options{})
			r.Registry = reg
			return r, err
		}
		res := e.ok("provision", "c3", "--intake", "http://h:1", "--admin", "http://h:2", "--leave-data")
		if !strings.Contains(res.stderr, "The map changed while this plan was made") || strings.Count(res.stdout, "Plan: add cell c3") != 2 {
			t.Errorf("re-plan not reported:\n%v", res)
		}
		m := e.load()
		if _, ok := m.Cell("c3"); !ok || m.Overrides()["intruder-1"] != "c1" || m.Version() != 5 {
			t.Errorf("after the re-plan: version %d, overrides %v, cells %v", m.Version(), m.Overrides(), m.ActiveCells())
		}

		r.races = 4
		before := len(e.load().Overrides())
		res = e.run("weight", "c1", "3", "--leave-data")
		if res.code != ExitFailure || !strings.Contains(res.stderr, "the map kept changing under this command (3 re-plans); nothing applied") {
			t.Errorf("endless races: %v", res)
		}
		m = e.load()
		if c, _ := m.Cell("c1"); c.Weight != 1 || len(m.Overrides()) != before+4 {
			t.Errorf("after giving up: c1 weight %d, %d overrides (want 1, %d)", c.Weight, len(m.Overrides()), before+4)
		}
	})
}

// TestLockHeld: a mutating command waits for the writer lock, and when it
// gives up it names the holder and changes nothing.
func TestLockHeld(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.setup([]string{"c1", "c2"}, nil)
		reg := e.open()
		defer reg.Close()
		lock, err := reg.Lock(context.Background(), "terraform apply by alice")
		if err != nil {
			t.Fatal(err)
		}
		before := e.raw()
		r := e.run("--timeout", "500ms", "weight", "c1", "2")
		if r.code != ExitFailure || !strings.Contains(r.stderr, "gave up waiting for the writer lock") ||
			!strings.Contains(r.stderr, "terraform apply by alice") {
			t.Errorf("%v", r)
		}
		if !bytes.Equal(before, e.raw()) {
			t.Error("the map changed while the lock was held by someone else")
		}
		// --lock-wait bounds the wait for the lock alone.
		start := time.Now()
		r = e.run("--timeout", "20s", "--lock-wait", "300ms", "weight", "c1", "2")
		if r.code != ExitFailure || !strings.Contains(r.stderr, "terraform apply by alice") || time.Since(start) > 10*time.Second {
			t.Errorf("with --lock-wait 300ms after %v: %v", time.Since(start), r)
		}
		// Reads and dry runs do not need the lock.
		e.ok("weight", "c1", "2", "--dry-run")
		e.ok("status")
		// Released, the change goes through.
		done := make(chan result, 1)
		go func() { done <- e.run("--timeout", "20s", "weight", "c1", "2", "--leave-data") }()
		time.Sleep(control.LockNotice + 300*time.Millisecond)
		if err := lock.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.code != 0 || !strings.Contains(r.stderr, "Waiting for the writer lock of") || !strings.Contains(r.stderr, "held by terraform apply by alice") {
			t.Errorf("after the lock was released: %v", r)
		}
		if c, _ := e.load().Cell("c1"); c.Weight != 2 {
			t.Errorf("c1 weight %d, want 2", c.Weight)
		}
	})
}

// TestInitForce replaces a map with an empty one whose version continues.
func TestInitForce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.setup([]string{"c1"}, nil)
		r := e.ok("init", "--force", "--agency", "nice=10")
		if !strings.Contains(r.stdout, "Plan: init --force (map version 2 → 3)") || !strings.Contains(r.stdout, "Replaces version 2: its 1 cell and 0 overrides are forgotten.") {
			t.Errorf("init --force:\n%s", r.stdout)
		}
		m := e.load()
		if m.Version() != 3 || len(m.Cells()) != 0 || m.Agencies()["nice"] != 10 || m.Slots() != 16384 {
			t.Errorf("after init --force: version %d, cells %v, agencies %v, slots %d", m.Version(), m.Cells(), m.Agencies(), m.Slots())
		}
	})
}
