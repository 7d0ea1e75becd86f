package registry

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/consultest"
)

// A ready agent is ready; a node it does not know, a token it refuses or
// an address nobody answers on is not, and says why.
func TestConsulReady(t *testing.T) {
	const token = "6d1c2c5e-6d1c-4c5e-8d1c-2c5e6d1c2c5e"
	agent := consultest.Start(t, consultest.WithACL(token))
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ConsulReady(ctx, hc, agent.Addr(), token, agent.Node()); err != nil {
		t.Fatalf("ready agent: %v", err)
	}
	if err := ConsulReady(ctx, hc, agent.Addr(), token, "no-such-node"); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("unknown node: %v, want not registered", err)
	}
	if err := ConsulReady(ctx, hc, agent.Addr(), "", agent.Node()); err == nil {
		t.Error("no token on an ACL agent: ready, want refused")
	}
	if err := ConsulReady(ctx, hc, "127.0.0.1:1", token, agent.Node()); err == nil {
		t.Error("nobody at the address: ready")
	}
}
