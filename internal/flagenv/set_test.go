package flagenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

// newSet is a program's Set with one flag of each kind the report shows.
func newSet(out io.Writer, environ ...string) (*Set, *string, *int) {
	s := NewSet("cell", io.Discard)
	s.Stdout = out
	s.Environ = func() []string { return environ }
	listen := s.String("intake", "127.0.0.1:8081", "")
	workers := s.Int("workers", 64, "")
	s.String("store", "", "")
	return s, listen, workers
}

func TestSetVersion(t *testing.T) {
	var out bytes.Buffer
	s, _, _ := newSet(&out)
	err := s.Parse([]string{"--version", "--workers", "nope"}, nil)
	if err == nil || !strings.Contains(err.Error(), "invalid value") {
		// a bad flag on the line is a usage error even beside --version
		t.Fatalf("Parse(--version --workers nope) = %v, want the flag error", err)
	}
	out.Reset()
	s, _, _ = newSet(&out)
	err = s.Parse([]string{"--version", "--workers", "3"}, nil)
	if !errors.Is(err, ErrVersion) || !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Parse(--version) = %v, want ErrVersion wrapping flag.ErrHelp", err)
	}
	if got := out.String(); !strings.HasPrefix(got, "cell devel (") || !strings.HasSuffix(got, ")\n") {
		t.Errorf("--version printed %q", got)
	}
}

func TestSetCheck(t *testing.T) {
	env := map[string]string{
		"CELLKIT_CELL_WORKERS": "12",          // the program's own: sets --workers
		"CELLKIT_WORKERS":      "13",          // loses to it: unused
		"CELLKIT_INTAKE":       "10.0.0.1:81", // loses to the command line: unused
		"CELLKIT_STORE":        "/data",       // shared: sets --store
		"CELLKIT_CHECK":        "true",        // never read: unused
		"CELLKIT_ROUTER_KEYS":  "/keys",       // another program's
		"HOME":                 "/root",       // not ours
	}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	var out bytes.Buffer
	s, listen, workers := newSet(&out, environ...)
	if err := s.Parse([]string{"--check", "--intake", "0.0.0.0:8081"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if !s.Checking() || *listen != "0.0.0.0:8081" || *workers != 12 {
		t.Fatalf("Checking %v, intake %q, workers %d", s.Checking(), *listen, *workers)
	}
	if err := s.Checked(nil); !errors.Is(err, ErrChecked) {
		t.Fatalf("Checked(nil) = %v, want ErrChecked", err)
	}
	var r Report
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("report %q: %v", out.String(), err)
	}
	want := map[string]Setting{
		"intake":  {"0.0.0.0:8081", "command line"},
		"workers": {"12", "CELLKIT_CELL_WORKERS"},
		"store":   {"/data", "CELLKIT_STORE"},
	}
	if !r.OK || r.Error != "" || r.Program != "cell" || len(r.Flags) != len(want) {
		t.Errorf("report %+v", r)
	}
	for name, w := range want {
		if r.Flags[name] != w {
			t.Errorf("flag %s = %+v, want %+v", name, r.Flags[name], w)
		}
	}
	if w := []string{"CELLKIT_CHECK", "CELLKIT_INTAKE", "CELLKIT_ROUTER_KEYS", "CELLKIT_WORKERS"}; !slices.Equal(r.Unused, w) {
		t.Errorf("unused %q, want %q", r.Unused, w)
	}

	// The program's refusal is the report's error, and Checked returns it.
	out.Reset()
	s, _, _ = newSet(&out)
	if err := s.Parse([]string{"--check"}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("--cell is\n required")
	if err := s.Checked(refusal); err != refusal {
		t.Fatalf("Checked(refusal) = %v", err)
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.OK || r.Error != "--cell is required" {
		t.Errorf("report of a refusal: %+v (%v)", r, err)
	}
}

func TestSetWithoutCheck(t *testing.T) {
	var out bytes.Buffer
	s, _, _ := newSet(&out)
	if err := s.Parse(nil, func(k string) string { return map[string]string{"CELLKIT_CHECK": "1", "CELLKIT_VERSION": "1"}[k] }); err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("no")
	if s.Checking() || s.Checked(nil) != nil || s.Checked(refusal) != refusal || out.Len() != 0 {
		t.Errorf("without --check: Checking %v, printed %q", s.Checking(), out.String())
	}
	if err := s.Parse([]string{"extra"}, nil); err == nil || !strings.Contains(err.Error(), "unexpected arguments") {
		t.Errorf("Parse(extra) = %v", err)
	}
}

// TestRelease: the release is the same whatever the placement flags say
// and wherever a setting came from (command line or environment), and
// changes with any other flag; an unknown placement flag is an error.
func TestRelease(t *testing.T) {
	release := func(args []string, env map[string]string, placement ...string) string {
		t.Helper()
		s, _, _ := newSet(io.Discard)
		s.Placement(placement...)
		if err := s.Parse(args, func(k string) string { return env[k] }); err != nil {
			t.Fatal(err)
		}
		r, err := s.Release()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(r.ID, r.Version+"@") || len(r.Binary) != 12 || len(r.Config) != 12 {
			t.Fatalf("release %+v", r)
		}
		return r.ID
	}
	base := release(nil, nil, "intake")
	if got := release([]string{"--intake", "10.0.0.1:9"}, nil, "intake"); got != base {
		t.Errorf("another address: %s, want %s", got, base)
	}
	if got := release(nil, map[string]string{"CELLKIT_CELL_WORKERS": "64"}, "intake"); got != base {
		t.Errorf("the default given by the environment: %s, want %s", got, base)
	}
	w8 := release([]string{"--workers", "8"}, nil, "intake")
	if w8 == base {
		t.Error("--workers 8 is the same release as the default")
	}
	if got := release(nil, map[string]string{"CELLKIT_CELL_WORKERS": "8"}, "intake"); got != w8 {
		t.Errorf("--workers 8 from the environment: %s, want %s", got, w8)
	}
	if got := release([]string{"--intake", "10.0.0.1:9"}, nil); got == base {
		t.Error("an address that is not a placement flag does not change the release")
	}
	s, _, _ := newSet(io.Discard)
	s.Placement("nope")
	if err := s.Parse(nil, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(); err == nil || !strings.Contains(err.Error(), "--nope") {
		t.Errorf("an unknown placement flag: %v", err)
	}
}
