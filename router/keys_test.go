package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
)

// cli runs the program with args and returns its stdout, stderr and error.
func cli(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut, nil)
	if err != nil && strings.Contains(err.Error(), "\n") {
		t.Errorf("%v: a multi-line error: %q", args, err)
	}
	return out.String(), errOut.String(), err
}

// mustAddKey runs `router keys add` and returns the key it printed.
func mustAddKey(t *testing.T, path, client string, flags ...string) string {
	t.Helper()
	out, errOut, err := cli(t, append([]string{"keys", "add", "--keys", path, "--client", client}, flags...)...)
	if err != nil {
		t.Fatalf("keys add %s: %v (%s)", client, err, errOut)
	}
	key := strings.TrimSpace(out)
	if !strings.HasPrefix(key, apikey.KeyPrefix) || strings.Contains(key, "\n") {
		t.Fatalf("keys add printed %q, want one key", out)
	}
	return key
}

func entriesOf(t *testing.T, path string) []api.KeyEntry {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var es []api.KeyEntry
	if err := json.Unmarshal(data, &es); err != nil {
		t.Fatal(err)
	}
	return es
}

func TestKeysAddListRevoke(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "keys.json")
	a1 := mustAddKey(t, path, "platform-a", "--rate", "50", "--burst", "100")
	a2 := mustAddKey(t, path, "platform-a") // rotation: the client's limits
	b1 := mustAddKey(t, path, "platform-b", "--rate", "0.5", "--burst", "3", "--lanes", "high,normal", "--default-lane", "high")
	es := entriesOf(t, path)
	if len(es) != 3 || es[1].Rate != 50 || es[1].Burst != 100 || es[1].KeySHA256 != apikey.Hash(a2) {
		t.Fatalf("entries %+v", es)
	}
	if es[1].Lanes != nil || strings.Join(es[2].Lanes, ",") != "high,normal" || es[2].DefaultLane != "high" {
		t.Fatalf("lanes of the entries %+v", es)
	}
	if _, _, err := cli(t, "keys", "add", "--keys", path, "--client", "platform-c", "--lanes", "urgent"); err == nil || !strings.Contains(err.Error(), `"urgent"`) {
		t.Fatalf("keys add --lanes urgent: %v, want a refusal naming the lane", err)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("keys file mode %v, want 0600", info.Mode())
	}
	data, _ := os.ReadFile(path)
	for _, k := range []string{a1, a2, b1} {
		if strings.Contains(string(data), k) {
			t.Error("the keys file holds a key itself")
		}
	}

	out, _, err := cli(t, "keys", "list", "--keys", path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	row := regexp.MustCompile(`^(\S+)\s+([0-9a-f]{12})\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)$`)
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "CLIENT") {
		t.Fatalf("list:\n%s", out)
	}
	for i, want := range [][]string{
		{"platform-a", apikey.Hash(a1)[:12], "50", "100", "normal", "normal"},
		{"platform-a", apikey.Hash(a2)[:12], "50", "100", "normal", "normal"},
		{"platform-b", apikey.Hash(b1)[:12], "0.5", "3", "high,normal", "high"},
	} {
		m := row.FindStringSubmatch(lines[i+1])
		if m == nil || !slices.Equal(m[1:], want) {
			t.Errorf("list row %d: %q, want %v", i, lines[i+1], want)
		}
	}
	for _, k := range []string{a1, a2, b1} {
		if strings.Contains(out, k) {
			t.Error("list shows a key")
		}
	}

	// Revoke a1 by key, a2 by its listed digest prefix: platform-a is gone.
	out, _, err = cli(t, "keys", "revoke", "--keys", path, "--key", a1)
	if err != nil || !strings.Contains(out, "revoked 1 key (client platform-a: 1); 2 left") {
		t.Fatalf("revoke --key: %q, %v", out, err)
	}
	out, _, err = cli(t, "keys", "revoke", "--keys", path, "--sha256", strings.ToUpper(apikey.Hash(a2)[:12]))
	if err != nil || !strings.Contains(out, "revoked 1 key") {
		t.Fatalf("revoke --sha256: %q, %v", out, err)
	}
	if es := entriesOf(t, path); len(es) != 1 || es[0].Client != "platform-b" {
		t.Fatalf("after revoking platform-a's keys: %+v", es)
	}
	// Two keys for c, then the client revoked whole.
	mustAddKey(t, path, "c")
	mustAddKey(t, path, "c")
	out, _, err = cli(t, "keys", "revoke", "--keys", path, "--client", "c")
	if err != nil || !strings.Contains(out, "revoked 2 keys (client c: 2); 1 left") {
		t.Fatalf("revoke --client: %q, %v", out, err)
	}

	// keygen with --keys is keys add.
	out, _, err = cli(t, "keygen", "-client", "platform-b", "-keys", path)
	if err != nil {
		t.Fatal(err)
	}
	if es := entriesOf(t, path); len(es) != 2 || es[1].KeySHA256 != apikey.Hash(strings.TrimSpace(out)) || es[1].Rate != 0.5 || es[1].DefaultLane != "high" {
		t.Errorf("keygen -keys: %+v", es)
	}
}

// TestKeysRefusals: bad input is a one-line error and leaves the file as
// it was.
func TestKeysRefusals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.json")
	a := mustAddKey(t, path, "platform-a", "--rate", "10", "--burst", "20")
	before, _ := os.ReadFile(path)
	broken := filepath.Join(dir, "broken.json")
	os.WriteFile(broken, []byte(`[{"client":"x"`), 0o600)
	invalid := filepath.Join(dir, "invalid.json")
	os.WriteFile(invalid, []byte(`[{"client":"x","key_sha256":"abc","rate":1,"burst":1}]`), 0o600)
	missing := filepath.Join(dir, "missing.json")
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"keys"}, "add, revoke or list"},
		{[]string{"keys", "rotate"}, `no command "rotate"`},
		{[]string{"keys", "add", "--client", "x"}, "--keys is required"},
		{[]string{"keys", "add", "--keys", path}, "--client is required"},
		{[]string{"keys", "add", "--keys", path, "--client", "bad id"}, "client"},
		{[]string{"keys", "add", "--keys", path, "--client", "n", "--rate", "0"}, "rate must be > 0"},
		{[]string{"keys", "add", "--keys", path, "--client", "n", "--rate", "NaN"}, "rate must be"},
		{[]string{"keys", "add", "--keys", path, "--client", "n", "--burst", "0"}, "burst"},
		{[]string{"keys", "add", "--keys", path, "--client", "platform-a", "--rate", "11"}, "different limits"},
		{[]string{"keys", "add", "--keys", broken, "--client", "n"}, broken},
		{[]string{"keys", "add", "--keys", path, "--client", "n", "extra"}, "unexpected arguments"},
		{[]string{"keys", "revoke", "--keys", path}, "one of --client, --key or --sha256"},
		{[]string{"keys", "revoke", "--keys", path, "--client", "platform-a", "--key", a}, "one of"},
		{[]string{"keys", "revoke", "--keys", path, "--client", "nobody"}, "client nobody: no such key"},
		{[]string{"keys", "revoke", "--keys", path, "--key", "ck_not-a-key"}, "no such key"},
		{[]string{"keys", "revoke", "--keys", path, "--sha256", "abc"}, "12 to 64 hex digits"},
		{[]string{"keys", "revoke", "--keys", path, "--sha256", "zzzzzzzzzzzzz"}, "hex digits"},
		{[]string{"keys", "revoke", "--keys", path, "--sha256", "000000000000"}, "no such key"},
		{[]string{"keys", "revoke", "--keys", path, "--key", a}, "no keys"},
		{[]string{"keys", "revoke", "--keys", path, "--client", "platform-a"}, "refusing to leave"},
		{[]string{"keys", "revoke", "--keys", missing, "--client", "platform-a"}, "no such file"},
		{[]string{"keys", "list", "--keys", missing}, "no such file"},
		{[]string{"keys", "list", "--keys", broken}, broken},
		{[]string{"keys", "list", "--keys", invalid}, "64 hex digits"},
		{[]string{"keys", "list"}, "--keys is required"},
	} {
		_, _, err := cli(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: %v, want an error about %q", tc.args, err, tc.err)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Errorf("the keys file changed:\n%s\nnow\n%s", before, after)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("revoke created a keys file")
	}
	// A prefix two keys share is refused (made so by hand: the digests are
	// random).
	two := filepath.Join(dir, "two.json")
	h1, h2 := "abcdef012345"+strings.Repeat("0", 52), "abcdef012345"+strings.Repeat("1", 52)
	os.WriteFile(two, []byte(`[{"client":"a","key_sha256":"`+h1+`","rate":1,"burst":1},{"client":"a","key_sha256":"`+h2+`","rate":1,"burst":1},{"client":"b","key_sha256":"`+apikey.Hash("b")+`","rate":1,"burst":1}]`), 0o600)
	if _, _, err := cli(t, "keys", "revoke", "--keys", two, "--sha256", "abcdef012345"); err == nil || !strings.Contains(err.Error(), "matches 2 keys") {
		t.Errorf("ambiguous prefix: %v", err)
	}
	if err := run(context.Background(), []string{"keys", "list", "-h"}, io.Discard, io.Discard, nil); err != nil {
		t.Errorf("keys list -h: %v", err)
	}
}
