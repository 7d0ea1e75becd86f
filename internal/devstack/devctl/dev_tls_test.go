package devctl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestDevUpTLSProcesses: with certificates, each cell is started with both
// listeners on mutual TLS (the cells' default client roles: router on the
// intake, operator on the admin API) and probed over https, and the router
// with its public listener on TLS and its certificate for the cells.
func TestDevUpTLSProcesses(t *testing.T) {
	o := devOptions{cells: 2}
	ports := devPorts{router: "127.0.0.1:1", routerAdmin: "127.0.0.1:2", nice: "127.0.0.1:3", kcb: "127.0.0.1:4",
		intake: []string{"127.0.0.1:11", "127.0.0.1:12"}, admin: []string{"127.0.0.1:21", "127.0.0.1:22"}}
	bins := map[string]string{"cell": "/b/cell", "router": "/b/router"}
	certs := devstack.DevTLS("/d/certs")
	procs := devCellsAndRouter(o, "/d", "file:/d/registry/map.json", bins, ports, certs)
	if len(procs) != 3 {
		t.Fatalf("%d processes", len(procs))
	}
	flags := func(p DevProcess) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(p.Args); i++ {
			if strings.HasPrefix(p.Args[i], "-") {
				m[strings.TrimLeft(p.Args[i], "-")] = p.Args[i+1]
			}
		}
		return m
	}
	for i, p := range procs[:2] {
		f := flags(p)
		for name, want := range map[string]string{
			"tls-cert": "/d/certs/cell.pem", "tls-key": "/d/certs/cell-key.pem", "tls-client-ca": "/d/certs/ca.pem",
			"admin-tls-cert": "/d/certs/cell.pem", "admin-tls-key": "/d/certs/cell-key.pem", "admin-tls-client-ca": "/d/certs/ca.pem",
		} {
			if f[name] != want {
				t.Errorf("%s --%s %q, want %q", p.Name, name, f[name], want)
			}
		}
		if p.Ready != "https://"+ports.admin[i]+"/readyz" {
			t.Errorf("%s ready URL %s", p.Name, p.Ready)
		}
	}
	f := flags(procs[2])
	for name, want := range map[string]string{
		"tls-cert": "/d/certs/router.pem", "tls-key": "/d/certs/router-key.pem",
		"cell-tls-ca": "/d/certs/ca.pem", "cell-tls-cert": "/d/certs/router.pem", "cell-tls-key": "/d/certs/router-key.pem",
	} {
		if f[name] != want {
			t.Errorf("router -%s %q, want %q", name, f[name], want)
		}
	}
	// Without certificates: plain, as before.
	for _, p := range devCellsAndRouter(o, "/d", "file:/d/registry/map.json", bins, ports, nil) {
		if slices.ContainsFunc(p.Args, func(a string) bool { return strings.Contains(a, "tls") }) || strings.HasPrefix(p.Ready, "https") {
			t.Errorf("%s without TLS: %v %s", p.Name, p.Args, p.Ready)
		}
	}
}

// TestEnsureDevCerts: dev up --tls makes the certificates once and keeps
// them (even those made for other hosts) while they are valid.
func TestEnsureDevCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	made, err := devstack.EnsureDevCerts(dir, devstack.DevHosts)
	if err != nil || !made {
		t.Fatalf("first: made %v, %v", made, err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "cell.pem"))
	if made, err := devstack.EnsureDevCerts(dir, []string{"elsewhere"}); err != nil || made {
		t.Fatalf("second: made %v, %v; want the files kept", made, err)
	}
	os.Remove(filepath.Join(dir, "operator-key.pem"))
	if made, err := devstack.EnsureDevCerts(dir, devstack.DevHosts); err != nil || !made {
		t.Fatalf("with a file missing: made %v, %v", made, err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "cell.pem"))
	if string(after) == string(before) {
		t.Fatal("the certificates were not made again")
	}
	if _, err := (devstack.DevTLS(dir)).Client(time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestDevStackTLS runs `dev up --tls` with the real programs: an inquiry
// through the router over https, cellctl status with the operator
// certificate, dev status, dev down.
func TestDevStackTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole local stack")
	}
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	// Built: the programs are found by name in one bin dir, and their mains
	// are in packages main that this test cannot import to run as them.
	build := func(name string) {
		out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), "github.com/cellkit/cellkit/"+name).CombinedOutput()
		if err != nil {
			t.Fatalf("go build ./%s: %v\n%s", name, err, out)
		}
	}
	build("router")
	for _, name := range []string{"cellctl", "agencysim", "cell"} {
		build(name)
	}
	cellctl := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(bin, "cellctl"), args...)
		cmd.Dir, cmd.Env = root, append(devstack.ChildEnv(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	run := func(env []string, args ...string) string {
		t.Helper()
		out, err := cellctl(env, args...)
		if err != nil {
			t.Fatalf("cellctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	t.Cleanup(func() {
		if s, err := readDevStack(filepath.Join(root, "var")); err == nil {
			devstack.StopAll(context.Background(), s.Processes, 0, nil) // SIGKILL
		}
		if t.Failed() {
			for _, name := range []string{"setup", "c1", "router"} {
				b, _ := os.ReadFile(filepath.Join(root, "var", "logs", name+".log"))
				t.Logf("%s.log:\n%s", name, b)
			}
		}
	})
	out := run(nil, "dev", "up", "--tls", "--cells", "2", "--router-port", "0", "--port-base", "0", "--agency-port", "0")
	st, err := readDevStack(filepath.Join(root, "var"))
	if err != nil {
		t.Fatal(err)
	}
	if st.TLS == nil || !strings.HasPrefix(st.Router, "https://") {
		t.Fatalf("dev.json: TLS %+v, router %s", st.TLS, st.Router)
	}
	for _, want := range []string{"--cacert var/certs/ca.pem", "CELLKIT_CELLCTL_TLS_CERT=" + st.TLS.Cert} {
		if !strings.Contains(out, want) {
			t.Errorf("dev up --tls output lacks %q:\n%s", want, out)
		}
	}

	// An inquiry through the router, over https all the way.
	client, err := st.TLS.Client(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseIdleConnections()
	body := `{"user_id":"u-42","product":"credit_loan","amount":5000000,"priority":"high"}`
	r := testkit.Do(t, client, http.MethodPost, st.Router+"/v1/inquiries", body, map[string]string{"X-API-Key": st.APIKey, "Content-Type": "application/json"})
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST through the router = %d %s", r.Status, r.Body)
	}
	var acc struct {
		StatusURL string `json:"status_url"`
	}
	r.JSON(t, &acc)
	testkit.WaitFor(t, 30*time.Second, "the inquiry to be done", func() bool {
		g := testkit.Do(t, client, http.MethodGet, st.Router+acc.StatusURL, nil, map[string]string{"X-API-Key": st.APIKey})
		return strings.Contains(string(g.Body), `"status":"done"`)
	})
	// The cells' intake takes no one but the router.
	c1, _ := st.Process("c1")
	if _, err := testkit.Send(client, http.MethodPost, "https://"+c1.Addrs["intake"]+"/v1/inquiries", body, nil); err == nil {
		t.Error("a cell's intake answered an operator's certificate")
	}

	// cellctl with the operator certificate, as the banner says.
	env := []string{"CELLKIT_CELLCTL_TLS_CA=" + st.TLS.CA, "CELLKIT_CELLCTL_TLS_CERT=" + st.TLS.Cert, "CELLKIT_CELLCTL_TLS_KEY=" + st.TLS.Key}
	var status struct {
		Cells []struct {
			Reachable bool            `json:"reachable"`
			Status    *api.CellStatus `json:"status"`
		} `json:"cells"`
	}
	if err := json.Unmarshal([]byte(run(env, "--registry", st.Registry, "--json", "status")), &status); err != nil {
		t.Fatal(err)
	}
	for _, c := range status.Cells {
		if !c.Reachable || c.Status == nil || !c.Status.Ready {
			t.Errorf("cellctl status with the operator certificate: %+v", c)
		}
	}
	if out, err := cellctl(nil, "--registry", st.Registry, "failed", "list", "c1"); err == nil {
		t.Errorf("cellctl failed list without a certificate succeeded:\n%s", out)
	}
	assertDevConsole(t, st, out, 2)
	out = run(nil, "dev", "status")
	if strings.Contains(out, " no ") {
		t.Errorf("dev status:\n%s", out)
	}
	out = run(nil, "dev", "down")
	if !strings.Contains(out, fmt.Sprintf("Stopped %d processes", len(st.Processes))) {
		t.Errorf("dev down:\n%s", out)
	}
	assertGone(t, st.Processes)
}
