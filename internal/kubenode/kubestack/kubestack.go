// Package kubestack installs cellkit on the Kubernetes node of
// internal/kubenode as a user installs it with the operator
// (docs/kubernetes.md): Consul for the map, a process of the host behind
// the Service the base names (consul-server.consul.svc); the namespace
// and the Secrets of docs/kubernetes.md; the map's agencies; and
// deploy/kubernetes/overlays/one-node applied with kubectl. Up returns
// once every Cell is ready and in the map and the routers serve through
// their Service. Lab plane.
package kubestack

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/kubenode"
)

// Config is where the node is and what goes on it.
type Config struct {
	// Node is the node's directory (kubenode.Config.Dir); the stack keeps
	// its files in Node/stack.
	Node string
	// Bin holds consul, router (its keys command) and kube/kubectl.
	Bin string
	// Overlay is the kustomization applied (the one-node overlay).
	Overlay string
	// ReadyWait bounds Up.
	ReadyWait time.Duration
}

// DefaultConfig is the stack on make cluster's node, from the repository.
func DefaultConfig() Config {
	return Config{Node: kubenode.DefaultConfig().Dir, Bin: "bin", Overlay: "deploy/kubernetes/overlays/one-node", ReadyWait: 5 * time.Minute}
}

// Namespace is the stack's, the one-node overlay's.
const Namespace = "cellkit"

// RouterName is the name the routers' public certificate holds, which a
// client from this host asks for when it calls the Service's address.
const RouterName = "cellkit-router.cellkit.svc"

// Stack is what Up made, as Node/stack/stack.json keeps it.
type Stack struct {
	// Registry is the map's registry from this host; ConsulToken its
	// token (the cellkit policy's), ConsulRoot the management token.
	Registry    string `json:"registry"`
	ConsulToken string `json:"consulToken"`
	ConsulRoot  string `json:"consulRoot"`
	// Router is the routers' Service from this host (https, its cluster
	// IP); its certificate names RouterName, signed by CA.
	Router string `json:"router"`
	CA     string `json:"ca"`
	// APIKey is a client's key with both lanes (client "loadtest").
	APIKey string `json:"apiKey"`
	// Tokens are the admin APIs' bearer tokens: cellctl, prometheus,
	// operator.
	Tokens map[string]string `json:"tokens"`
	// NATSToken and NATSRoutePassword are the cells' NATS secrets.
	NATSToken         string `json:"natsToken"`
	NATSRoutePassword string `json:"natsRoutePassword"`
	// Consul is its process, also in the node's record (the node's Down
	// stops it).
	Consul devstack.Process `json:"consul"`
	// Cells are the Cells the overlay made.
	Cells []string `json:"cells"`
}

// Options are Up's collaborators.
type Options struct {
	Progress io.Writer // a line per step, if set
}

func (o Options) say(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

func dir(cfg Config) string  { return filepath.Join(cfg.Node, "stack") }
func path(cfg Config) string { return filepath.Join(dir(cfg), "stack.json") }

// Read reads the stack on the node in nodeDir.
func Read(nodeDir string) (*Stack, error) {
	b, err := os.ReadFile(path(Config{Node: nodeDir}))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no stack on the cluster in %s", nodeDir)
	}
	if err != nil {
		return nil, err
	}
	var st Stack
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path(Config{Node: nodeDir}), err)
	}
	return &st, nil
}

func (st *Stack) save(cfg Config) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path(cfg), append(b, '\n'), 0o600)
}

// secret is a random token of n bytes, hex.
func secret(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b)
}
