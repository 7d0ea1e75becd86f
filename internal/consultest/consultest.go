// Package consultest runs a real Consul agent (`consul agent -dev`) for a test.
//
// Start returns only once the agent has elected itself leader and registered
// its node, so KV writes and sessions (locks) work at once. Each agent listens
// on its own free loopback ports and is stopped by t.Cleanup; its log is kept
// in the test's temp dir and printed when the test fails.
//
// The binary is $CELLKIT_CONSUL, or bin/consul next to the module's go.mod
// (`make tools` builds it).
package consultest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cellkit/cellkit/internal/testkit"
)

// EnvBinary names the environment variable that overrides the binary path.
const EnvBinary = "CELLKIT_CONSUL"

const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 5 * time.Second
	pollEvery    = 25 * time.Millisecond
	startTries   = 5
)

// errPortTaken means the agent could not bind one of its ports: another
// process took it between our probe and the agent's bind.
var errPortTaken = errors.New("port already in use")

// Option changes how an agent is started.
type Option func(*Agent)

// WithACL starts the agent with ACLs enabled and default-deny; token is both
// the initial management token and the agent's own token. Client and the
// readiness checks use it.
func WithACL(token string) Option {
	return func(a *Agent) { a.token = token }
}

// Agent is a running (or stopped) Consul dev agent.
type Agent struct {
	bin     string
	node    string
	token   string
	logPath string
	ports   ports

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

type ports struct {
	http, dns, serfLAN, serfWAN, server int
}

// Start starts an agent and registers its shutdown with t.Cleanup.
func Start(t testing.TB, opts ...Option) *Agent {
	t.Helper()
	bin := binary(t)
	dir := t.TempDir()
	a := &Agent{
		bin:     bin,
		node:    "consultest-" + randomHex(t, 4),
		logPath: filepath.Join(dir, "consul.log"),
	}
	for _, o := range opts {
		o(a)
	}
	// Registered first so it runs last: the log is complete when dumped.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consul agent %s log:\n%s", a.node, a.log())
		}
	})
	t.Cleanup(func() { a.Stop(t) })

	var err error
	for range startTries {
		if a.ports, err = freePorts(); err != nil {
			t.Fatalf("consultest: pick ports: %v", err)
		}
		if err = a.launch(); !errors.Is(err, errPortTaken) {
			break
		}
		t.Logf("consultest: %v, retrying with new ports", err)
	}
	if err != nil {
		t.Fatalf("consultest: start agent: %v", err)
	}
	return a
}

// Addr is the agent's HTTP address, "127.0.0.1:PORT".
func (a *Agent) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports.http))
}

// Token is the ACL management token, empty without WithACL.
func (a *Agent) Token() string { return a.token }

// Client returns an API client for the agent (with its token, if any).
func (a *Agent) Client(t testing.TB) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = a.Addr()
	cfg.Token = a.token
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatalf("consultest: api client: %v", err)
	}
	return c
}

// Stop stops the agent (SIGTERM, then SIGKILL if it lingers) and waits for it
// to exit. Its ports stop answering. Stopping a stopped agent does nothing.
func (a *Agent) Stop(t testing.TB) {
	t.Helper()
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(stopTimeout):
		t.Logf("consultest: agent %s ignored SIGTERM for %v, killing it", a.node, stopTimeout)
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
	a.cmd = nil
}

// Restart starts a stopped agent again on the same ports and waits until it is
// ready. A dev agent keeps its data in memory: the restarted one is empty, and
// its Raft indexes start again from 1.
func (a *Agent) Restart(t testing.TB) {
	t.Helper()
	a.Stop(t)
	if err := a.launch(); err != nil {
		t.Fatalf("consultest: restart agent: %v", err)
	}
}

// launch starts the process on a.ports and waits until it is ready.
func (a *Agent) launch() error {
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer logf.Close() // the child holds its own descriptor
	start, _ := logf.Seek(0, io.SeekEnd)

	// dev mode enables both gRPC listeners (8502, 8503) by default; tests need
	// neither, and fixed ports would collide between parallel agents.
	hcl := `disable_update_check = true`
	if a.token != "" {
		hcl += fmt.Sprintf(` acl { enabled = true default_policy = "deny" tokens { initial_management = %q agent = %q } }`, a.token, a.token)
	}
	cmd := exec.Command(a.bin, "agent", "-dev",
		"-node", a.node,
		"-bind", "127.0.0.1",
		"-client", "127.0.0.1",
		"-http-port", strconv.Itoa(a.ports.http),
		"-dns-port", strconv.Itoa(a.ports.dns),
		"-serf-lan-port", strconv.Itoa(a.ports.serfLAN),
		"-serf-wan-port", strconv.Itoa(a.ports.serfWAN),
		"-server-port", strconv.Itoa(a.ports.server),
		"-grpc-port=-1",
		"-grpc-tls-port=-1",
		"-log-level", "info",
		"-hcl", hcl,
	)
	cmd.Stdout = logf
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", a.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	a.cmd, a.exited = cmd, exited

	if err := a.waitReady(); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		a.cmd = nil
		if out := a.logFrom(start); bytes.Contains(out, []byte("address already in use")) {
			return fmt.Errorf("%w (ports %+v)", errPortTaken, a.ports)
		}
		return err
	}
	return nil
}

// waitReady polls until the agent has a leader and its node is in the
// catalog: sessions refuse nodes that are not registered yet.
func (a *Agent) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	var last error
	for {
		last = a.ready(ctx, hc)
		if last == nil {
			return nil
		}
		select {
		case <-a.exited:
			return fmt.Errorf("agent exited before it was ready (%v)", a.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("agent not ready after %v: %w", readyTimeout, last)
		case <-time.After(pollEvery):
		}
	}
}

func (a *Agent) ready(ctx context.Context, hc *http.Client) error {
	var leader string
	if err := a.getJSON(ctx, hc, "/v1/status/leader", &leader); err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader yet")
	}
	var node *struct{ Node struct{ Node string } }
	if err := a.getJSON(ctx, hc, "/v1/catalog/node/"+a.node, &node); err != nil {
		return err
	}
	if node == nil {
		return errors.New("node not registered yet")
	}
	// A session (the registry's writer lock) needs the node's serfHealth
	// check, which the agent registers after the node itself.
	var checks []struct{ CheckID, Status string }
	if err := a.getJSON(ctx, hc, "/v1/health/node/"+a.node, &checks); err != nil {
		return err
	}
	for _, c := range checks {
		if c.CheckID == "serfHealth" && c.Status == "passing" {
			return nil
		}
	}
	return errors.New("the node's serfHealth check not passing yet")
}

func (a *Agent) getJSON(ctx context.Context, hc *http.Client, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.Addr()+path, nil)
	if err != nil {
		return err
	}
	if a.token != "" {
		req.Header.Set("X-Consul-Token", a.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, v)
}

func (a *Agent) log() []byte { return a.logFrom(0) }

func (a *Agent) logFrom(off int64) []byte {
	b, err := os.ReadFile(a.logPath)
	if err != nil {
		return []byte(fmt.Sprintf("(no log: %v)", err))
	}
	if off > int64(len(b)) {
		off = 0
	}
	return b[off:]
}

// binary finds the consul binary or fails the test saying how to build it.
func binary(t testing.TB) string {
	t.Helper()
	path := os.Getenv(EnvBinary)
	if path == "" {
		root, err := testkit.ModuleRoot()
		if err != nil {
			t.Fatalf("consul binary not found: %v: run `make tools` or set %s", err, EnvBinary)
		}
		path = filepath.Join(root, "bin", "consul")
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		t.Fatalf("consul binary not found at %s: run `make tools`", path)
	}
	return path
}

// freePorts picks five distinct loopback ports that are free for both TCP and
// UDP (serf and DNS use both). Another process may still take one before the
// agent binds it; Start retries then.
func freePorts() (ports, error) {
	var ps []int
	var hold []io.Closer
	defer func() {
		for _, c := range hold {
			c.Close()
		}
	}()
	for len(ps) < 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return ports{}, err
		}
		hold = append(hold, l)
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // UDP side taken: keep the TCP listener held, pick another
		}
		hold = append(hold, u)
		ps = append(ps, port)
	}
	return ports{http: ps[0], dns: ps[1], serfLAN: ps[2], serfWAN: ps[3], server: ps[4]}, nil
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("consultest: random: %v", err)
	}
	return hex.EncodeToString(b)
}

// Node is the agent's node name.
func (a *Agent) Node() string { return a.node }
