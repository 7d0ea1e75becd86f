package netstack

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/netlab"
	"github.com/cellkit/cellkit/internal/netlab/netlabtest"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func hc() *http.Client { return &http.Client{Timeout: 5 * time.Second} }

func getStatus(t *testing.T, c *http.Client, url, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Consul-Token", token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.CloseIdleConnections()
	return resp.StatusCode
}

// TestUpInquiryDown brings the stack up on a lab with two cells of three
// instances (the binaries of ./bin), sends an inquiry through router1 from
// the root namespace to the cell that owns its user on other hosts, reads
// it back through both routers, and takes everything down: no process,
// namespace or link of the lab is left.
func TestUpInquiryDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Consul, two cells, two routers and the simulator on a network lab")
	}
	netlabtest.Require(t)
	bin, err := filepath.Abs("../../../bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"consul", "cell", "router", "agencysim", "nats-server"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Skipf("no %s in %s: run make build (make tools for consul)", b, bin)
		}
	}
	ctx := testkit.Context(t, 90*time.Second)
	dir := t.TempDir()
	t0 := time.Now()
	st, err := Up(ctx, Config{Dir: dir, Bin: bin, Cells: 2, Instances: 3, Lab: netlab.Config{Family: netlabtest.Family, StateDir: netlab.DefaultStateDir}, ReadyWait: 45 * time.Second},
		Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	prefix := st.Lab.Prefix
	down := false
	t.Cleanup(func() {
		if !down {
			if _, err := Down(context.Background(), dir, nil); err != nil {
				t.Errorf("down: %v", err)
			}
		}
		netlabtest.AssertGone(t, prefix)
	})
	t.Logf("up in %v: lab %s on %s", time.Since(t0).Round(time.Millisecond), prefix, st.Lab.Subnet)
	if len(st.Processes) != 16 || len(st.Hosts) != 10 || len(st.Routers) != 2 || len(st.Cells()) != 6 || len(st.CellSet) != 2 {
		t.Fatalf("stack: %d processes on %d hosts, routers %v, %d cell processes of %d cells; want 16, 10, 2, 6, 2",
			len(st.Processes), len(st.Hosts), st.Routers, len(st.Cells()), len(st.CellSet))
	}

	// Every socket is bound to its host's address or loopback.
	lab, err := st.OpenLab(netlab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range lab.Hosts() {
		ls, err := h.Listeners()
		if err != nil || len(ls) == 0 {
			t.Errorf("%s: listeners %v, %v", h.Name(), ls, err)
		}
		for _, l := range ls {
			if a := l.Addr.Addr(); a != h.Addr() && !a.IsLoopback() {
				t.Errorf("%s: %v bound to neither %v nor loopback", h.Name(), l, h.Addr())
			}
		}
	}

	// The user's cell by the map in Consul, read with the stack's token.
	reg, err := registry.Open(registry.Config{URL: st.Registry, Token: st.ConsulToken}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	m, err := reg.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.CellSet {
		entry, ok := m.Cell(c.ID)
		if !ok || len(entry.Instances) != 3 {
			t.Errorf("map: cell %s has instances %+v, want 3", c.ID, entry.Instances)
		}
	}
	// The processes hold a token of the cellkit policy, not the
	// management token: listing the ACL tokens is refused.
	aclResp := getStatus(t, hc(), "http://"+strings.TrimPrefix(strings.TrimSuffix(st.Registry, "/cellkit"), "consul://")+"/v1/acl/tokens", st.ConsulToken)
	if aclResp != http.StatusForbidden || st.ConsulToken == st.ConsulRoot {
		t.Errorf("the processes' Consul token lists ACL tokens: %d, want 403", aclResp)
	}
	const user = "u-42"
	want := m.Lookup(user).Cell
	cell, ok := st.Cell(want)
	if !ok {
		t.Fatalf("the map sends %s to %q, not a cell of the stack", user, want)
	}
	cellProc, _ := st.Process(cell.Instances[0].Proc)
	r1, _ := st.Process("router1")
	if cellProc.Netns == r1.Netns || !strings.HasPrefix(st.Router, "http://"+strings.Split(r1.Addrs["listen"], ":")[0]) {
		t.Fatalf("router1 %v and cell %s %v", r1.Addrs, want, cellProc.Addrs)
	}

	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	key := map[string]string{"X-API-Key": st.APIKey}
	resp := testkit.Do(t, hc, http.MethodPost, st.Router+"/v1/inquiries",
		map[string]any{"user_id": user, "product": "credit_loan", "amount": 5000000, "priority": "high"}, key)
	if resp.Status != http.StatusAccepted || resp.Header.Get("Cellkit-Cell") != want {
		t.Fatalf("POST through router1 = %d (cell %q) %s; want 202 from %s", resp.Status, resp.Header.Get("Cellkit-Cell"), resp.Body, want)
	}
	var acc struct{ ID, Cell, Status, StatusURL string }
	resp.JSON(t, &acc)
	if acc.Cell != want || !strings.HasPrefix(acc.ID, want+"-") {
		t.Errorf("accepted %+v, want cell %s", acc, want)
	}
	var rec struct{ ID, Cell, Status string }
	for _, router := range st.Routers {
		r := testkit.Do(t, hc, http.MethodGet, router+"/v1/inquiries/"+acc.ID, nil, key)
		r.JSON(t, &rec)
		if r.Status != http.StatusOK || rec.ID != acc.ID || rec.Cell != want || (rec.Status != "pending" && rec.Status != "done") {
			t.Errorf("GET through %s = %d %s; want 200, cell %s, pending or done", router, r.Status, r.Body, want)
		}
	}
	// The cell calls the agencies on their own host: the inquiry completes.
	testkit.WaitFor(t, 20*time.Second, "inquiry "+acc.ID+" to be done", func() bool {
		r := testkit.Do(t, hc, http.MethodGet, st.Router+"/v1/inquiries/"+acc.ID, nil, key)
		r.JSON(t, &rec)
		return rec.Status == "done"
	})

	t1 := time.Now()
	sw, err := Down(ctx, dir, nil)
	down = true
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("down in %v", time.Since(t1).Round(time.Millisecond))
	netlabtest.AssertGone(t, prefix)
	if len(sw.Killed) > 0 {
		t.Errorf("down had to kill %v: they outlived SIGTERM to the recorded processes", sw.Killed)
	}
	for _, p := range st.Processes {
		if devstack.Alive(p.PID) {
			t.Errorf("%s (pid %d) still runs", p.Name, p.PID)
		}
	}
	for _, path := range []string{StatePath(dir), netlab.StatePath(st.Lab.StateDir, prefix)} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after down: %v", path, err)
		}
	}
	if _, err := Down(ctx, dir, nil); err == nil || !strings.Contains(err.Error(), "no network lab recorded") {
		t.Errorf("a second down = %v, want: no network lab recorded", err)
	}
}
