package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// FindBinaries finds the programs names in the first of dirs that holds
// them all (executable regular files) and returns their absolute paths by
// name. The error names what is missing where, and how to get it.
func FindBinaries(dirs []string, names ...string) (map[string]string, error) {
	var missing []string
	for _, d := range dirs {
		found := map[string]string{}
		missing = missing[:0]
		for _, n := range names {
			p, err := filepath.Abs(filepath.Join(d, n))
			if err != nil {
				return nil, err
			}
			if info, err := os.Stat(p); err != nil || !info.Mode().IsRegular() || info.Mode()&0o111 == 0 {
				missing = append(missing, n)
				continue
			}
			found[n] = p
		}
		if len(missing) == 0 {
			return found, nil
		}
	}
	hint := "run 'make build'"
	if slices.Contains(missing, "consul") {
		hint += " (and 'make tools' for consul)"
	}
	return nil, fmt.Errorf("no %s in %s: %s, or pass --bin DIR", strings.Join(missing, ", "), strings.Join(dirs, " or "), hint)
}

// Keygen makes a new API key for client with 'router keygen' (1,000/s,
// bursts of 2,000, both lanes) in the keys file keys, and returns it.
func Keygen(ctx context.Context, routerBin, keys, client string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, routerBin, "keygen", "-client", client, "-rate", "1000", "-burst", "2000", "-lanes", "high,normal", "-keys", keys)
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &errb, ChildEnv()
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("router keygen: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	key := strings.TrimSpace(out.String())
	if key == "" {
		return "", errors.New("router keygen printed no key")
	}
	return key, nil
}
