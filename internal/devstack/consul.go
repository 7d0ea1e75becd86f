package devstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cellkit/cellkit/internal/registry"
)

// A lab's Consul server (the network lab's, the Kubernetes node's): its
// process and readiness, and the token of the cellkit policy.

// The ports a lab's Consul server listens on, at its own address.
const (
	ConsulHTTP    = 8500
	ConsulServer  = 8300
	ConsulSerfLAN = 8301
	ConsulSerfWAN = 8302
)

// ConsulProcess is a Consul server in dev mode (in memory, its own
// leader) bound to addr, with ACLs on and token as the initial
// management token; its log goes to log.
func ConsulProcess(bin string, addr netip.Addr, token, log string) Process {
	a := addr.String()
	hp := func(port int) string { return netip.AddrPortFrom(addr, uint16(port)).String() }
	hcl := fmt.Sprintf(`disable_update_check = true acl { enabled = true default_policy = "deny" tokens { initial_management = %q agent = %q } }`, token, token)
	return Process{
		Name: "consul", Bin: bin, Log: log,
		Args: []string{"agent", "-dev", "-node", "consul", "-bind", a, "-client", a, "-advertise", a,
			"-http-port", strconv.Itoa(ConsulHTTP), "-server-port", strconv.Itoa(ConsulServer),
			"-serf-lan-port", strconv.Itoa(ConsulSerfLAN), "-serf-wan-port", strconv.Itoa(ConsulSerfWAN),
			"-dns-port=-1", "-grpc-port=-1", "-grpc-tls-port=-1", "-log-level", "info", "-hcl", hcl},
		// Answers 200 once HTTP is up; WaitConsul waits for the leader.
		Ready: "http://" + hp(ConsulHTTP) + "/v1/status/leader",
		Addrs: map[string]string{"http": hp(ConsulHTTP), "server": hp(ConsulServer)},
	}
}

// WaitConsul waits until the agent at httpAddr has a leader and its node
// is in the catalog: the writer lock's session needs both.
func WaitConsul(ctx context.Context, hc *http.Client, httpAddr, token string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for {
		last = registry.ConsulReady(ctx, hc, httpAddr, token, "consul")
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consul on %s not ready within %v: %w", httpAddr, within, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while waiting for consul: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CellkitConsulToken makes, with the management token root, the policy
// the cellkit processes need (the keys under cellkit/, sessions for the
// writer lock, reading nodes) and a token of it, on the agent at
// httpAddr.
func CellkitConsulToken(httpAddr, root string) (string, error) {
	client, err := api.NewClient(&api.Config{Address: httpAddr, Token: root})
	if err != nil {
		return "", err
	}
	rules := `key_prefix "cellkit/" { policy = "write" }
session_prefix "" { policy = "write" }
node_prefix "" { policy = "read" }
service_prefix "" { policy = "read" }`
	pol, _, err := client.ACL().PolicyCreate(&api.ACLPolicy{Name: "cellkit", Rules: rules}, nil)
	if err != nil {
		return "", fmt.Errorf("consul policy: %w", err)
	}
	tok, _, err := client.ACL().TokenCreate(&api.ACLToken{Description: "cellkit processes", Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
	if err != nil {
		return "", fmt.Errorf("consul token: %w", err)
	}
	if tok.SecretID == "" {
		return "", errors.New("consul token: no secret in the answer")
	}
	return tok.SecretID, nil
}
