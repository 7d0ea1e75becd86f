package registry

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/testkit"
)

// holdLockEnv makes the test binary a lock holder process (see TestMain).
const holdLockEnv = "CELLKIT_TEST_HOLD_LOCK"

func TestMain(m *testing.M) {
	if path := os.Getenv(holdLockEnv); path != "" {
		holdLockUntilKilled(path)
		return
	}
	// Every Watch, lock renewal and follower a test starts must have
	// stopped by the end. Idle keep-alive connections of HTTP clients are
	// not leaks.
	testkit.VerifyTestMain(m)
}

// holdLockUntilKilled is the body of the holder process: take the writer
// lock, say so, wait to be killed.
func holdLockUntilKilled(path string) {
	r, err := NewFile(FileConfig{Path: path}, Options{})
	if err != nil {
		os.Exit(3)
	}
	if _, err := r.Lock(context.Background(), "doomed holder"); err != nil {
		os.Exit(4)
	}
	os.Stdout.WriteString("locked\n")
	select {}
}

func fileHarness(t *testing.T) (harness, string) {
	dir := t.TempDir()
	live := filepath.Join(dir, "registry")
	path := filepath.Join(live, "map.json")
	return harness{
		open: func(t *testing.T) Registry {
			r, err := NewFile(FileConfig{Path: path, PollInterval: 20 * time.Millisecond}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			return r
		},
		// The registry directory disappears (like an unmounted volume) and
		// comes back with its data.
		stop: func(t *testing.T) {
			if err := os.Rename(live, filepath.Join(dir, "away")); err != nil {
				t.Fatal(err)
			}
		},
		start: func(t *testing.T) {
			if err := os.Rename(filepath.Join(dir, "away"), live); err != nil {
				t.Fatal(err)
			}
		},
		holdAndDie: func(t *testing.T, _ Registry) func() {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), holdLockEnv+"="+path)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			killed := false
			kill := func() {
				if !killed {
					killed = true
					cmd.Process.Kill()
					cmd.Wait()
				}
			}
			t.Cleanup(kill)
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "locked\n" {
				t.Fatalf("lock holder process said %q, %v", line, err)
			}
			return kill
		},
	}, path
}

func TestFileContract(t *testing.T) {
	h, _ := fileHarness(t)
	runContract(t, h)
}

func TestFileNeverAcceptsACorruptMap(t *testing.T) {
	h, path := fileHarness(t)
	ctx := testkit.Context(t, 2*time.Minute)
	r := h.open(t)
	m := firstMap(t)
	if err := r.CompareAndSwap(ctx, 0, m); err != nil {
		t.Fatal(err)
	}
	good, _ := m.Encode()
	for name, data := range map[string][]byte{
		"half-written": good[:len(good)/2],
		"empty":        {},
		"invalid map":  []byte(strings.Replace(string(good), `"version":1`, `"version":0`, 1)),
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := r.Load(ctx); err == nil || errors.Is(err, ErrNoMap) {
				t.Fatalf("Load() of a %s file = %v, %v; want an error", name, got, err)
			}
			// A corrupt file is not silently replaced either.
			if err := r.CompareAndSwap(ctx, 1, pin(t, m, "x")); err == nil || errors.Is(err, ErrConflict) {
				t.Fatalf("CompareAndSwap over a %s file = %v, want a refusal", name, err)
			}
			var events []Event
			wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			r.Watch(wctx, 0, func(ev Event) { events = append(events, ev) })
			for _, ev := range events {
				if ev.Map != nil || ev.Err == nil {
					t.Fatalf("Watch over a %s file delivered %+v, want only errors", name, ev)
				}
			}
		})
	}
}

func TestFileWatchSeesNewVersionWithin200ms(t *testing.T) {
	dir := t.TempDir()
	r, err := NewFile(FileConfig{Path: filepath.Join(dir, "map.json")}, Options{}) // default poll interval
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 2*time.Minute)
	m := firstMap(t)
	if err := r.CompareAndSwap(ctx, 0, m); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 4)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go r.Watch(wctx, 1, func(ev Event) {
		if ev.Map != nil {
			got <- time.Now()
		}
	})
	time.Sleep(50 * time.Millisecond) // let the watcher take its first look
	wrote := time.Now()
	if err := r.CompareAndSwap(ctx, 1, pin(t, m, "u")); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		if d := at.Sub(wrote); d > 200*time.Millisecond {
			t.Errorf("new version seen after %v, want within 200ms", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("new version not seen")
	}
}

func TestOpenURLs(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		url     string
		want    string
		wantErr string
	}{
		{url: "file:" + dir + "/a.json", want: "file:" + dir + "/a.json"},
		{url: "file://" + dir + "/b.json", want: "file:" + dir + "/b.json"},
		{url: "consul://127.0.0.1:8500/cellkit", want: "consul://127.0.0.1:8500/cellkit"},
		{url: "consul://127.0.0.1:8500", want: "consul://127.0.0.1:8500/cellkit"},
		{url: "consul:///x", wantErr: "no host"},
		{url: "zookeeper://x", wantErr: `unknown scheme "zookeeper"`},
		{url: "file:", wantErr: "no path"},
		{url: "", wantErr: "no registry"},
	}
	t.Setenv(EnvRegistry, "")
	for _, tt := range tests {
		r, err := Open(Config{URL: tt.url}, Options{})
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Open(%q) = %v, want error containing %q", tt.url, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q) = %v", tt.url, err)
			continue
		}
		if got := r.Describe(); got != tt.want {
			t.Errorf("Open(%q).Describe() = %q, want %q", tt.url, got, tt.want)
		}
		r.Close()
	}
	t.Setenv(EnvRegistry, "file:"+dir+"/env.json")
	if r, err := Open(Config{}, Options{}); err != nil || r.Describe() != "file:"+dir+"/env.json" {
		t.Errorf("Open(\"\") with %s set = %v, %v", EnvRegistry, r, err)
	}
}
