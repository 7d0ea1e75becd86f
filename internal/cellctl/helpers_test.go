package cellctl

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/consultest"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestMain(m *testing.M) {
	celltest.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// epoch is the fake clock's start: maps committed in tests carry it.
var epoch = time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC)

// forEachBackend runs f as a subtest per backend. The Consul agent is
// started by the first subtest that needs it and stopped with the parent.
func forEachBackend(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	var agent *consultest.Agent
	var once sync.Once
	for _, b := range []string{"file", "consul"} {
		t.Run(b, func(t *testing.T) {
			var e *env
			if b == "file" {
				e = newFileEnv(t)
			} else {
				once.Do(func() { agent = consultest.Start(t) })
				e = newConsulEnv(t, agent)
			}
			f(t, e)
		})
	}
}

// env is one registry and a cellctl wired to it with a fake clock.
type env struct {
	t     *testing.T
	url   string
	raw   func() []byte
	clock *testkit.Clock
	cli   *CLI
	// replace holds strings that vary between runs (the registry's name,
	// test servers' URLs) and what golden files show instead.
	replace []string
}

func newEnv(t *testing.T, url string, raw func() []byte) *env {
	e := &env{t: t, url: url, raw: raw, clock: testkit.NewClock(epoch)}
	e.cli = &CLI{Now: e.clock.Now, Getenv: func(string) string { return "" }}
	reg := e.open()
	e.replace = append(e.replace, reg.Describe(), "REGISTRY")
	reg.Close()
	return e
}

func newFileEnv(t *testing.T) *env {
	path := filepath.Join(t.TempDir(), "map.json")
	return newEnv(t, "file:"+path, func() []byte {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		return data
	})
}

var prefixes sync.Map // test name → count, for unique Consul prefixes

func newConsulEnv(t *testing.T, agent *consultest.Agent) *env {
	name := strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name()))
	n, _ := prefixes.LoadOrStore(name, new(int))
	*n.(*int)++
	prefix := fmt.Sprintf("%s-%d", name, *n.(*int))
	kv := agent.Client(t).KV()
	return newEnv(t, "consul://"+agent.Addr()+"/"+prefix, func() []byte {
		pair, _, err := kv.Get(prefix+"/map", nil)
		if err != nil {
			t.Fatalf("read consul key: %v", err)
		}
		if pair == nil {
			return nil
		}
		return pair.Value
	})
}

func (e *env) open() registry.Registry {
	e.t.Helper()
	reg, err := registry.Open(registry.Config{URL: e.url}, registry.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	return reg
}

// load reads the map through the registry.
func (e *env) load() *slotmap.Map {
	e.t.Helper()
	reg := e.open()
	defer reg.Close()
	m, err := reg.Load(context.Background())
	if err != nil {
		e.t.Fatalf("load map: %v", err)
	}
	return m
}

// result is one cellctl run.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("cellctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// run runs cellctl against the env's registry (--registry is added).
func (e *env) run(args ...string) result {
	e.t.Helper()
	return e.runCtx(context.Background(), args...)
}

func (e *env) runCtx(ctx context.Context, args ...string) result {
	e.t.Helper()
	var out, errw bytes.Buffer
	full := append([]string{"--registry", e.url}, args...)
	code := e.cli.Run(ctx, full, &out, &errw)
	return result{args: args, stdout: out.String(), stderr: errw.String(), code: code}
}

// ok runs cellctl and fails the test unless it exits 0.
func (e *env) ok(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("%v", r)
	}
	return r
}

// json runs cellctl with --json, expects exit 0 and decodes stdout into v.
func (e *env) json(v any, args ...string) {
	e.t.Helper()
	r := e.ok(append(args, "--json")...)
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(v); err != nil {
		e.t.Fatalf("cellctl %s --json: %v\n%s", strings.Join(args, " "), err, r.stdout)
	}
	if dec.More() {
		e.t.Fatalf("cellctl %s --json printed more than one document:\n%s", strings.Join(args, " "), r.stdout)
	}
}

// normalize replaces what varies between runs.
func (e *env) normalize(s string) string {
	return strings.NewReplacer(e.replace...).Replace(s)
}

// golden compares out with testdata/NAME.golden (rewritten with -update).
func (e *env) golden(name, out string) {
	e.t.Helper()
	golden(e.t, name, e.normalize(out))
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// setup builds a map through cellctl: 16384 slots, nice=80 kcb=40, and the
// given cells, all active, with admin URLs from admin (nil: closed ports).
func (e *env) setup(cells []string, admin func(id string) string) {
	e.t.Helper()
	e.ok("init", "--agency", "nice=80", "--agency", "kcb=40", "--slots", "4096")
	for _, id := range cells {
		a := "http://127.0.0.1:1"
		if admin != nil {
			a = admin(id)
		}
		// A map built for a test: a cell that does not run holds no
		// inquiries to move.
		e.ok("provision", id, "--intake", "http://127.0.0.1:1", "--admin", a, "--leave-data")
	}
}
