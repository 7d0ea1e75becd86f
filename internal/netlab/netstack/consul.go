package netstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/netlab"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// The lab's Consul: its process and readiness, the token of the cellkit
// policy, and the map written into it.

// consulProcess is a Consul server in dev mode (in memory, its own
// leader) bound to the host's address, with ACLs on and token as the
// initial management token.
func consulProcess(bin string, h *netlab.Host, token string) devstack.Process {
	a := h.Addr().String()
	hcl := fmt.Sprintf(`disable_update_check = true acl { enabled = true default_policy = "deny" tokens { initial_management = %q agent = %q } }`, token, token)
	return devstack.Process{
		Name: "consul", Bin: bin,
		Args: []string{"agent", "-dev", "-node", "consul", "-bind", a, "-client", a, "-advertise", a,
			"-http-port", strconv.Itoa(consulHTTP), "-server-port", strconv.Itoa(consulServer),
			"-serf-lan-port", strconv.Itoa(consulSerfLAN), "-serf-wan-port", strconv.Itoa(consulSerfWAN),
			"-dns-port=-1", "-grpc-port=-1", "-grpc-tls-port=-1", "-log-level", "info", "-hcl", hcl},
		// Answers 200 once HTTP is up; waitConsul waits for the leader.
		Ready: "http://" + h.HostPort(consulHTTP) + "/v1/status/leader",
		Addrs: map[string]string{"http": h.HostPort(consulHTTP), "server": h.HostPort(consulServer)},
	}
}

// waitConsul waits until the agent has a leader and its node is in the
// catalog: the writer lock's session needs both.
func waitConsul(ctx context.Context, hc *http.Client, h *netlab.Host, token string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for {
		last = registry.ConsulReady(ctx, hc, h.HostPort(consulHTTP), token, "consul")
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consul on %s not ready within %v: %w", h.Addr(), within, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while waiting for consul: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// provision writes the map into Consul through control.Ensure, as
// cellctl would: init, then provision for each cell (at its first
// instance) and instance set for each instance. What each did goes to
// DIR/logs/setup.log.
func provision(ctx context.Context, st *Stack, hosts map[string]*netlab.Host) error {
	logf, err := os.OpenFile(filepath.Join(st.Dir, "logs", "setup.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	reg, err := registry.Open(registry.Config{URL: st.Registry, Token: st.ConsulToken}, registry.Options{})
	if err != nil {
		return err
	}
	defer reg.Close()
	const origin = "loadtest net up"
	ctl := control.New(reg, control.Config{Holder: control.Holder(origin), Origin: origin},
		control.Options{Note: func(n control.Note) { fmt.Fprintf(logf, "note: %s\n", n.Text) }})
	var cells []control.StackCell
	for _, c := range st.CellSet {
		sc := control.StackCell{ID: c.ID}
		for _, in := range c.Instances {
			h := hosts[in.Host]
			sc.Instances = append(sc.Instances, slotmap.Instance{ID: in.ID,
				Intake: "http://" + h.HostPort(cellIntake), Admin: "http://" + h.HostPort(cellAdmin)})
		}
		sc.Intake, sc.Admin = sc.Instances[0].Intake, sc.Instances[0].Admin
		cells = append(cells, sc)
	}
	return ctl.Ensure(ctx, control.EnsureChange{Agencies: devstack.Agencies, Cells: cells,
		Step: func(s control.Step) {
			if s.Result != nil {
				fmt.Fprintf(logf, "%s: map version %d (%s)\n", s.What, s.Result.Version, s.Result.Plan.Op)
			}
		}})
}

// cellkitToken makes, with the management token, the policy the cellkit
// processes need (the keys under cellkit/, sessions for the writer lock,
// reading nodes) and a token of it.
func cellkitToken(h *netlab.Host, root string) (string, error) {
	client, err := api.NewClient(&api.Config{Address: h.HostPort(consulHTTP), Token: root})
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
