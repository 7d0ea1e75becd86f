package cellctl

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/celltest"
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
