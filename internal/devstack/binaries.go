package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/atomicfile"
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

// APIKey is a stack's API key for client, made with Keygen in
// DIR/router/keys.json (the routers' keys file) and kept in
// DIR/router/dev-key. With keep, a key made before is used again if its
// client may still send both lanes; otherwise the keys file is made anew.
func APIKey(ctx context.Context, routerBin, dir, client string, keep bool) (string, error) {
	keyFile := filepath.Join(dir, "router", "dev-key")
	keysFile := filepath.Join(dir, "router", "keys.json")
	if b, err := os.ReadFile(keyFile); keep && err == nil && len(bytes.TrimSpace(b)) > 0 && hasBothLanes(keysFile, client) {
		return string(bytes.TrimSpace(b)), nil
	}
	// A key of another run, or from before lanes (its client may send only
	// normal inquiries): start again.
	if err := os.Remove(keysFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	key, err := Keygen(ctx, routerBin, keysFile, client)
	if err != nil {
		return "", err
	}
	return key, atomicfile.WriteFile(keyFile, []byte(key+"\n"), 0o600)
}

// hasBothLanes says whether the keys file lets client send both high and
// normal inquiries.
func hasBothLanes(keysFile, client string) bool {
	data, err := os.ReadFile(keysFile)
	if err != nil {
		return false
	}
	var entries []api.KeyEntry
	if json.Unmarshal(data, &entries) != nil {
		return false
	}
	for _, e := range entries {
		if e.Client == client {
			return slices.Contains(e.Lanes, "high") && slices.Contains(e.Lanes, "normal")
		}
	}
	return false
}
