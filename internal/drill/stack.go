package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// Stack is a running local stack, as recorded in its dev.json.
type Stack struct {
	devstack.Stack

	path     string                     // dev.json
	cellctl  string                     // the cellctl binary
	owned    bool                       // started by StartStack: Stop takes it down
	children map[string]*devstack.Child // processes this drill restarted
}

// Process is one process of the stack.
type Process = devstack.Process

// LoadStack reads a running stack's dev.json; cellctl is the cellctl binary
// the drills call (drain, undrain).
func LoadStack(path, cellctl string) (*Stack, error) {
	rec, err := devstack.Read(path)
	if err != nil {
		return nil, fmt.Errorf("read the stack: %w (start one with 'cellctl dev up')", err)
	}
	return &Stack{Stack: *rec, path: path, cellctl: cellctl, children: map[string]*devstack.Child{}}, nil
}

// stackParent is where the drills' stacks live: /dev/shm, a tmpfs, where
// the machine has one, else the temporary directory. The cells' stores
// sync every write; on this machine's shared virtual disk those syncs
// stalled every cell at once for 16–45 ms every few seconds, whatever the
// drill did, and where such a stall fell decided the other cells' p99
// verdicts (a stack on tmpfs: p99 3.0 ms against 5.1, p99.9 9.9 against
// 26). The disk-full drill mounts a filesystem of its own either way.
func stackParent() string {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err == nil && st.Type == unix.TMPFS_MAGIC && unix.Access("/dev/shm", unix.W_OK) == nil {
		return "/dev/shm"
	}
	return ""
}

// StartStack runs `cellctl dev up` detached in a fresh temporary directory
// on free ports, with the binaries in binDir and any extra dev up flags, and
// returns the stack.
func StartStack(ctx context.Context, binDir string, devUpArgs ...string) (*Stack, error) {
	cellctl, err := filepath.Abs(filepath.Join(binDir, "cellctl"))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(stackParent(), "cellkit-drill-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"dev", "up", "--dir", dir, "--router-port", "0", "--port-base", "0", "--agency-port", "0"}, devUpArgs...)
	out, err := exec.CommandContext(ctx, cellctl, args...).CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("cellctl dev up: %v: %s", err, bytes.TrimSpace(out))
	}
	st, err := LoadStack(devstack.StatePath(dir), cellctl)
	if err != nil {
		return nil, err
	}
	st.owned = true
	return st, nil
}

// Stop takes down a stack that StartStack started, as 'cellctl dev down'
// does, and removes its directory; a stack that was running before is left
// alone.
func (st *Stack) Stop(ctx context.Context) error {
	if !st.owned {
		return nil
	}
	// The record as it stands: a deployer may have replaced processes.
	if rec, err := devstack.Read(st.path); err == nil {
		st.Processes = rec.Processes
	}
	devstack.StopAll(ctx, st.Processes, devstack.StopGrace, nil)
	return os.RemoveAll(st.Dir)
}

// Proc returns the process named name.
func (st *Stack) Proc(name string) (*Process, error) {
	if p, ok := st.Process(name); ok {
		return p, nil
	}
	return nil, fmt.Errorf("no process %q in %s", name, st.path)
}

// Cells are the cell processes' names, c1 first.
func (st *Stack) Cells() []string {
	var cells []string
	for _, p := range st.Stack.Cells() {
		cells = append(cells, p.Name)
	}
	return cells
}

// Kill sends SIGKILL to the process and waits until it is gone.
func (st *Stack) Kill(ctx context.Context, name string) error {
	p, err := st.Proc(name)
	if err != nil {
		return err
	}
	if _, err := devstack.Stop(ctx, *p, 0); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", name, p.PID, err)
	}
	return nil
}

// Restart starts the process again with the binary and arguments recorded
// in dev.json, appending to its log, and records the new pid there.
func (st *Stack) Restart(name string) error {
	p, err := st.Proc(name)
	if err != nil {
		return err
	}
	c, err := devstack.Start(*p)
	if err != nil {
		return err
	}
	st.children[name], p.PID = c, c.PID
	return devstack.Write(st.path, &st.Stack)
}

// WaitReady polls the process's readiness URL until it answers 200; a
// process that ends meanwhile fails it with the end of its log.
func (st *Stack) WaitReady(ctx context.Context, name string, within time.Duration) error {
	p, err := st.Proc(name)
	if err != nil {
		return err
	}
	c := st.children[name]
	if c == nil {
		c = devstack.Attach(*p)
	}
	return devstack.WaitReady(ctx, adminClient, within, c)
}

// Cellctl runs the cellctl binary against the stack's registry.
func (st *Stack) Cellctl(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"--registry", st.Registry}, args...)
	out, err := exec.CommandContext(ctx, st.cellctl, full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("cellctl %s: %v: %s", strings.Join(args, " "), err, devstack.Tail(string(out), 3))
	}
	return string(out), nil
}

// Status reads a cell's admin status.
func (st *Stack) Status(ctx context.Context, cell string) (api.CellStatus, error) {
	var cs api.CellStatus
	p, err := st.Proc(cell)
	if err != nil {
		return cs, err
	}
	err = getJSON(ctx, "http://"+p.Addrs["admin"]+api.PathCellStatus, &cs)
	return cs, err
}

var adminClient = &http.Client{Timeout: 2 * time.Second}

func getJSON(ctx context.Context, url string, v any) error {
	return doJSON(ctx, http.MethodGet, url, nil, v)
}

func doJSON(ctx context.Context, method, url string, body, v any) error {
	return requestJSON(ctx, adminClient, method, url, "", body, v)
}

// getInquiry reads inquiry id through the router at base, with the API
// key, into v.
func getInquiry(ctx context.Context, hc *http.Client, base, key, id string, v any) error {
	return requestJSON(ctx, hc, http.MethodGet, base+api.PathInquiries+"/"+id, "", nil, v, "X-API-Key", key)
}

// loadMap reads the cell map of the registry at url (token: Consul's ACL
// token, "" for none).
func loadMap(ctx context.Context, url, token string) (*slotmap.Map, error) {
	reg, err := registry.Open(registry.Config{URL: url, Token: token}, registry.Options{})
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	return reg.Load(ctx)
}

// settled polls the inquiries ids through the router at base until each
// is no longer pending, or within has passed, and returns the views of
// those that settled.
func settled(ctx context.Context, hc *http.Client, base, key string, ids []string, within time.Duration) map[string]inquiry.View {
	final := map[string]inquiry.View{}
	deadline := time.Now().Add(within)
	for len(final) < len(ids) && time.Now().Before(deadline) && ctx.Err() == nil {
		for _, id := range ids {
			if _, ok := final[id]; ok {
				continue
			}
			var v inquiry.View
			if err := getInquiry(ctx, hc, base, key, id, &v); err == nil && v.Status != inquiry.Pending {
				final[id] = v
			}
		}
		if len(final) < len(ids) {
			time.Sleep(200 * time.Millisecond) // polling the router, not waiting on a result
		}
	}
	return final
}

// statusError is an answer that is not 2xx.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// requestJSON sends body (if not nil) as JSON, with the bearer token if
// not empty and the header pairs of hdr (name, value...), and decodes a 2xx
// answer into v (if not nil); another status is a *statusError.
func requestJSON(ctx context.Context, hc *http.Client, method, url, token string, body, v any, hdr ...string) error {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return &statusError{code: resp.StatusCode, msg: fmt.Sprintf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(b))}
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(v)
}
