package tfprovider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/cellctl"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// Origin marks the writer lock and the change text of every map version the
// provider commits.
const Origin = "terraform"

// client is what the resources share: the registry, and cellctl run in
// process for every change. The provider has no map-changing code of its
// own: a cell created, reweighted, drained or removed here goes through the
// same command, plan, writer lock, compare-and-swap, history and
// queue-aware drain as from cellctl's command line.
type client struct {
	registry   string
	lockWait   time.Duration
	adminToken string
	cli        *cellctl.CLI
}

func newClient(reg string, lockWait time.Duration, adminToken string) *client {
	return &client{registry: reg, lockWait: lockWait, adminToken: adminToken, cli: &cellctl.CLI{Origin: Origin}}
}

// configured is the client a resource or data source gets from the
// provider's Configure (ProviderData is nil while Terraform validates a
// configuration before the provider is configured: keep what it had).
func configured(providerData any, had *client) *client {
	if c, ok := providerData.(*client); ok {
		return c
	}
	return had
}

// run runs one cellctl command with --json and returns its standard output,
// or an error holding the one line cellctl printed on failure. within
// bounds the command (0: cellctl's default).
func (c *client) run(ctx context.Context, within time.Duration, args ...string) ([]byte, error) {
	full := []string{"--registry", c.registry, "--json", "--lock-wait", c.lockWait.String()}
	if within > 0 {
		full = append(full, "--timeout", within.String())
	}
	if c.adminToken != "" {
		full = append(full, "--admin-token", c.adminToken)
	}
	full = append(full, args...)
	var out, errb bytes.Buffer
	if code := c.cli.Run(ctx, full, &out, &errb); code != cellctl.ExitOK {
		return nil, errors.New(lastLine(errb.String(), "cellctl "+strings.Join(args, " ")+" failed"))
	}
	return out.Bytes(), nil
}

// dryRun runs a map change with --dry-run: the planner's refusal, if any,
// without touching the registry.
func (c *client) dryRun(ctx context.Context, args ...string) error {
	_, err := c.run(ctx, 0, append(args, "--dry-run")...)
	return err
}

// lastLine returns the last non-empty line of s without cellctl's
// "cellctl COMMAND: " prefix, or def.
func lastLine(s, def string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if l == "" {
		return def
	}
	if strings.HasPrefix(l, "cellctl ") {
		if i := strings.Index(l, ": "); i > 0 {
			l = l[i+2:]
		}
	}
	return l
}

// load reads the current map; registry.ErrNoMap when there is none.
func (c *client) load(ctx context.Context) (*slotmap.Map, error) {
	reg, err := registry.Open(registry.Config{URL: c.registry}, registry.Options{})
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(ctx, cellctl.DefaultTimeout)
	defer cancel()
	m, err := reg.Load(ctx)
	if err != nil && !errors.Is(err, registry.ErrNoMap) {
		return nil, fmt.Errorf("read the map from registry %s: %w", reg.Describe(), err)
	}
	return m, err
}
