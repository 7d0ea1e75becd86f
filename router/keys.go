package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/atomicfile"
)

// The keys file's commands. Each edit is checked with apikey.Parse
// and written atomically (internal/atomicfile): a router watching the file
// sees the old keys or the new ones, never a mix.
//
//	router keys add --keys FILE --client C [--rate R --burst B --lanes high,normal --default-lane L]
//	router keys revoke --keys FILE (--client C | --key KEY | --sha256 HEX)
//	router keys list --keys FILE
//
// Rotation: add a second key for the client (both work, sharing the
// client's rate limit), move the platform to the new key, revoke the old.

const keysUsage = `usage:
  router keys add --keys FILE --client C [--rate R --burst B --lanes high,normal --default-lane L]   a new key for C, printed once
  router keys revoke --keys FILE (--client C | --key KEY | --sha256 HEX)
  router keys list --keys FILE`

func keysCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("keys: add, revoke or list? (router keys -h)")
	}
	switch args[0] {
	case "add":
		return keysAdd(args[1:], stdout, stderr)
	case "revoke":
		return keysRevoke(args[1:], stdout, stderr)
	case "list":
		return keysList(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stderr, keysUsage)
		return nil
	}
	return fmt.Errorf("keys: no command %q: add, revoke or list", args[0])
}

// keyFlags parses a keys command's flags; keys (--keys) is required.
type keyFlags struct {
	fs   *flag.FlagSet
	keys string
}

func newKeyFlags(name string, stderr io.Writer) *keyFlags {
	kf := &keyFlags{fs: flag.NewFlagSet("router "+name, flag.ContinueOnError)}
	kf.fs.SetOutput(stderr)
	kf.fs.StringVar(&kf.keys, "keys", "", "the keys file (required)")
	return kf
}

// parse reports flag.ErrHelp for -h: the caller returns nil then.
func (kf *keyFlags) parse(args []string) error {
	if err := kf.fs.Parse(args); err != nil {
		return err
	}
	if kf.fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", kf.fs.Name(), kf.fs.Args())
	}
	if kf.keys == "" {
		return fmt.Errorf("%s: --keys is required", kf.fs.Name())
	}
	return nil
}

func (kf *keyFlags) set(name string) bool {
	set := false
	kf.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func keysAdd(args []string, stdout, stderr io.Writer) error {
	kf := newKeyFlags("keys add", stderr)
	client := kf.fs.String("client", "", "client id the key belongs to (required)")
	rate := kf.fs.Float64("rate", 100, "the client's sustained limit, requests per second (default: the client's, for a client with keys already)")
	burst := kf.fs.Int("burst", 200, "the client's burst (default: the client's, for a client with keys already)")
	var lanes lanesFlag
	kf.fs.Var(&lanes, "lanes", "the priorities the client may send, `high,normal` or one of them (default: the client's, for a client with keys already, else normal)")
	defLane := kf.fs.String("default-lane", "", "the lane of an inquiry that names no priority (default: the client's, else normal if allowed, else high)")
	if err := kf.parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *client == "" {
		return errors.New("keys add: --client is required")
	}
	entry := api.KeyEntry{Client: *client, Rate: *rate, Burst: *burst, Lanes: lanes, DefaultLane: *defLane}
	key, sum, n, err := addKey(kf.keys, entry, kf.set("rate"), kf.set("burst"))
	if err != nil {
		return fmt.Errorf("keys add: %w", err)
	}
	fmt.Fprintln(stdout, key)
	fmt.Fprintf(stderr, "added a key for client %s to %s (sha256 %s; the client has %d); the key is shown this once\n", *client, kf.keys, sum[:12], n)
	return nil
}

// addKey makes a key for entry's client and adds it to the keys file at
// path (created if missing). A client's keys share its limits and lanes:
// entry's rate and burst are the client's keys' unless given, and so are
// its lanes and default lane unless set (apikey.Parse refuses a difference).
// It returns the key, its SHA-256 and the client's number of keys.
func addKey(path string, entry api.KeyEntry, rateGiven, burstGiven bool) (key, sum string, n int, err error) {
	entries, err := readEntries(path, true)
	if err != nil {
		return "", "", 0, err
	}
	for _, e := range entries {
		if e.Client == entry.Client {
			if !rateGiven {
				entry.Rate = e.Rate
			}
			if !burstGiven {
				entry.Burst = e.Burst
			}
			if entry.Lanes == nil {
				entry.Lanes = e.Lanes
			}
			if entry.DefaultLane == "" {
				entry.DefaultLane = e.DefaultLane
			}
			break
		}
	}
	if math.IsNaN(entry.Rate) || math.IsInf(entry.Rate, 0) {
		return "", "", 0, errors.New("rate must be > 0")
	}
	key, sum, err = apikey.Generate()
	if err != nil {
		return "", "", 0, err
	}
	entry.KeySHA256 = sum
	entries = append(entries, entry)
	if err := writeEntries(path, entries); err != nil {
		return "", "", 0, err
	}
	for _, e := range entries {
		if e.Client == entry.Client {
			n++
		}
	}
	return key, sum, n, nil
}

func keysRevoke(args []string, stdout, stderr io.Writer) error {
	kf := newKeyFlags("keys revoke", stderr)
	client := kf.fs.String("client", "", "revoke every key of this client")
	key := kf.fs.String("key", "", "revoke this key")
	sha := kf.fs.String("sha256", "", "revoke the key with this SHA-256 (hex; at least its first 12 digits, as `router keys list` shows)")
	if err := kf.parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	given := 0
	for _, v := range []string{*client, *key, *sha} {
		if v != "" {
			given++
		}
	}
	if given != 1 {
		return errors.New("keys revoke: give one of --client, --key or --sha256")
	}
	entries, err := readEntries(kf.keys, false)
	if err != nil {
		return err
	}
	var match func(api.KeyEntry) bool
	what := ""
	switch {
	case *client != "":
		match = func(e api.KeyEntry) bool { return e.Client == *client }
		what = "client " + *client
	case *key != "":
		sum := apikey.Hash(*key)
		match = func(e api.KeyEntry) bool { return strings.EqualFold(e.KeySHA256, sum) }
		what = "the key given"
	default:
		prefix := strings.ToLower(*sha)
		if !isHex(prefix) || len(prefix) < 12 || len(prefix) > 64 {
			return fmt.Errorf("keys revoke: --sha256 %q: want 12 to 64 hex digits", *sha)
		}
		match = func(e api.KeyEntry) bool { return strings.HasPrefix(strings.ToLower(e.KeySHA256), prefix) }
		what = "sha256 " + prefix
	}
	var kept []api.KeyEntry
	removed := map[string]int{}
	for _, e := range entries {
		if match(e) {
			removed[e.Client]++
			continue
		}
		kept = append(kept, e)
	}
	n := len(entries) - len(kept)
	switch {
	case n == 0:
		return fmt.Errorf("keys revoke: %s: no such key in %s", what, kf.keys)
	case *sha != "" && n > 1:
		return fmt.Errorf("keys revoke: sha256 %s matches %d keys; give more digits", *sha, n)
	case len(kept) == 0:
		return fmt.Errorf("keys revoke: refusing to leave %s with no keys (%d would go); add another key first", kf.keys, n)
	}
	if err := writeEntries(kf.keys, kept); err != nil {
		return fmt.Errorf("keys revoke: %w", err)
	}
	var clients []string
	for _, c := range slices.Sorted(maps.Keys(removed)) {
		clients = append(clients, fmt.Sprintf("client %s: %d", c, removed[c]))
	}
	fmt.Fprintf(stdout, "revoked %d %s (%s); %d left in %s\n", n, plural(n, "key"), strings.Join(clients, ", "), len(kept), kf.keys)
	return nil
}

func keysList(args []string, stdout, stderr io.Writer) error {
	kf := newKeyFlags("keys list", stderr)
	if err := kf.parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if _, err := apikey.Load(kf.keys); err != nil {
		return err
	}
	entries, err := readEntries(kf.keys, false)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tSHA256\tRATE\tBURST\tLANES\tDEFAULT")
	for _, e := range entries {
		lanes, def := e.Lanes, e.DefaultLane
		if lanes == nil {
			lanes = []string{"normal"}
		}
		if def == "" {
			def = lanes[0]
			if slices.Contains(lanes, "normal") {
				def = "normal"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", e.Client, strings.ToLower(e.KeySHA256)[:12],
			strconv.FormatFloat(e.Rate, 'f', -1, 64), e.Burst, strings.Join(lanes, ","), def)
	}
	return tw.Flush()
}

// readEntries reads the keys file's entries; a missing file is no entries
// if missingOK.
func readEntries(path string, missingOK bool) ([]api.KeyEntry, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && missingOK {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	var entries []api.KeyEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, fmt.Errorf("keys file %s: %w", path, err)
	}
	return entries, nil
}

// writeEntries replaces the keys file with entries once they parse.
func writeEntries(path string, entries []api.KeyEntry) error {
	out, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return err // a rate of NaN or ±Inf
	}
	out = append(out, '\n')
	if _, err := apikey.Parse(out); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, out, 0o600)
}

// lanesFlag is a comma-separated list of lanes; unset is nil.
type lanesFlag []string

func (l *lanesFlag) String() string { return strings.Join(*l, ",") }

func (l *lanesFlag) Set(v string) error {
	*l = strings.Split(v, ",")
	return nil // apikey.Parse says what is wrong with them
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
