package cellctl

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/console"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestConsoleOverMutualTLS: `cellctl console` with --console-tls-* serves
// https, may listen beyond loopback, and lets an operator's client
// certificate in without a token; a client with another role's certificate
// or none gets no data.
func TestConsoleOverMutualTLS(t *testing.T) {
	certs := celltest.DevCerts(t)
	e := newFileEnv(t)
	e.ok("init", "--agency", "nice=4")
	e.ok("provision", "c1", "--intake", "http://127.0.0.1:1", "--admin", "http://127.0.0.1:2")
	addr := testkit.FreeAddr(t)
	listen := strings.Replace(addr, "127.0.0.1", "0.0.0.0", 1) // not loopback: TLS allows it
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var r result
	wg.Go(func() {
		r = e.runCtx(ctx, "console", "--listen", listen,
			"--console-tls-cert", certs.Cert(pki.RoleCell), "--console-tls-key", certs.Key(pki.RoleCell),
			"--console-tls-client-ca", certs.CA())
	})
	t.Cleanup(func() {
		stop()
		wg.Wait()
		if r.code != ExitOK {
			t.Errorf("console ended: %v", r)
		}
	})
	operator := certs.TLSClient(t, pki.RoleOperator)
	get := func(hc *http.Client) (int, string, error) {
		resp, err := hc.Get("https://" + addr + "/api/view")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	testkit.WaitFor(t, 10*time.Second, "the console on https", func() bool {
		code, _, err := get(operator)
		return err == nil && code == http.StatusOK
	})
	if code, body, err := get(operator); err != nil || code != http.StatusOK || !strings.Contains(body, `"c1"`) {
		t.Errorf("an operator's certificate, no token: %d %v %.200s", code, err, body)
	}
	for role, hc := range map[string]*http.Client{"router": certs.TLSClient(t, pki.RoleRouter), "none": certs.TLSClient(t, "")} {
		if code, body, err := get(hc); err == nil && (code == http.StatusOK || strings.Contains(body, "c1")) {
			t.Errorf("a client with the %s certificate: %d %.200s, want no data", role, code, body)
		}
	}
}

// TestConsoleTrustAndItsStartLine: `cellctl console` calls with the admin
// token only the admin APIs in --trust-admin (a cell provisioned with
// another admin URL is not asked, and the page's view says so), and its
// start-up line names the --token-file without printing the token.
func TestConsoleTrustAndItsStartLine(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]string{} // server → Authorization headers received
	server := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got[name] = append(got[name], r.Header.Get("Authorization"))
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"cell":"c","ready":true,"intake":"open"}`)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	trusted, other := server("trusted"), server("other")
	e := newFileEnv(t)
	e.ok("init", "--agency", "nice=4")
	e.ok("provision", "c1", "--intake", "http://127.0.0.1:1", "--admin", trusted)
	e.ok("provision", "c2", "--intake", "http://127.0.0.1:1", "--admin", other, "--leave-data")
	mu.Lock()
	clear(got) // the provisions' data moves asked c1
	mu.Unlock()
	tokenFile := filepath.Join(t.TempDir(), "console-token")
	const consoleToken = "the-console-token-from-a-file-0123456789"
	if err := os.WriteFile(tokenFile, []byte(consoleToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testkit.FreeAddr(t)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var r result
	wg.Go(func() {
		r = e.runCtx(ctx, "--admin-token", "the-admin-token-0123456789", "console", "--listen", addr,
			"--token-file", tokenFile, "--trust-admin", trusted)
	})
	var v console.View
	testkit.WaitFor(t, 10*time.Second, "the console's view", func() bool {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/view", nil)
		req.Header.Set("Authorization", "Bearer "+consoleToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&v) == nil
	})
	stop()
	wg.Wait()
	if r.code != ExitOK {
		t.Fatalf("console ended: %v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got["other"]) != 0 || len(got["trusted"]) == 0 || got["trusted"][0] != "Bearer the-admin-token-0123456789" {
		t.Errorf("the admin APIs got %q", got)
	}
	if len(v.Cells) != 2 || !v.Cells[0].Reachable || !v.Cells[1].Untrusted || len(v.Refused) != 1 || v.Refused[0].Admin != other {
		t.Errorf("the view: cells %+v, refused %+v", v.Cells, v.Refused)
	}
	if strings.Contains(r.stdout+r.stderr, consoleToken) || !strings.Contains(r.stdout, "Console: http://"+addr+"/ (sign in with the token in "+tokenFile+")") {
		t.Errorf("the start-up line:\n%s", r)
	}
	if !strings.Contains(r.stderr, "only these admin APIs: "+trusted) {
		t.Errorf("the note of the trusted admin APIs:\n%s", r.stderr)
	}
}
