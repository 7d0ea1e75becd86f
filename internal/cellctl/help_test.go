package cellctl

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func runPlain(args ...string) result {
	var out, errw bytes.Buffer
	code := (&CLI{Getenv: func(string) string { return "" }}).Run(context.Background(), args, &out, &errw)
	return result{args: args, stdout: out.String(), stderr: errw.String(), code: code}
}

// TestHelp: every command has help with examples, reachable as
// 'cellctl help CMD' and 'cellctl CMD -h' (exit 0, on stdout), and the
// overview lists every command.
func TestHelp(t *testing.T) {
	overview := runPlain("help")
	if overview.code != 0 || overview.stderr != "" {
		t.Fatalf("%v", overview)
	}
	golden(t, "help", overview.stdout)
	for _, c := range commands() {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			if !c.hidden && !strings.Contains(overview.stdout, "  "+strings.TrimSpace(c.name+" "+c.argsUsage)) {
				t.Errorf("the overview does not list %q", c.name)
			}
			if c.help == "" || c.examples == "" || c.summary == "" {
				t.Errorf("%q lacks help, summary or examples", c.name)
			}
			h := runPlain(append([]string{"help"}, strings.Fields(c.name)...)...)
			if h.code != 0 || !strings.HasPrefix(h.stdout, "Usage: cellctl "+c.name) || !strings.Contains(h.stdout, "\nExamples:\n  cellctl "+strings.Fields(c.name)[0]) ||
				!strings.Contains(h.stdout, "--registry URL") {
				t.Errorf("%v", h)
			}
			for _, flag := range []string{"-h", "--help"} {
				r := runPlain(append(strings.Fields(c.name), flag)...)
				if r.code != 0 || r.stdout != h.stdout {
					t.Errorf("cellctl %s %s differs from cellctl help %s:\n%v", c.name, flag, c.name, r)
				}
			}
			if c.mutates && !strings.Contains(h.stdout, "--dry-run") {
				t.Errorf("%q changes the map but its help has no --dry-run", c.name)
			}
		})
	}
	golden(t, "help_drain", runPlain("help", "drain").stdout)

	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{nil, ExitUsage, ""},
		{[]string{"-h"}, ExitOK, "Usage: cellctl [global flags] COMMAND"},
		{[]string{"help", "map"}, ExitOK, "cellctl map: one of format, show, lookup, diff, history"},
		{[]string{"help", "nope"}, ExitUsage, ""},
		{[]string{"map"}, ExitUsage, ""},
	} {
		r := runPlain(tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout, tc.out) {
			t.Errorf("%v", r)
		}
	}
}

// TestInterspersedFlags: flags go before or after the command and its
// arguments; negative numbers are arguments.
func TestInterspersedFlags(t *testing.T) {
	e := newFileEnv(t)
	e.setup([]string{"c1", "c2"}, nil)
	for _, args := range [][]string{
		{"--json", "weight", "c1", "2", "--dry-run"},
		{"weight", "--dry-run", "c1", "--json", "2"},
		{"weight", "c1", "2", "--json", "--dry-run"},
		{"weight", "--json", "--dry-run", "--", "c1", "2"},
	} {
		r := e.ok(args...)
		if !strings.Contains(r.stdout, `"dry_run": true`) {
			t.Errorf("%v", r)
		}
	}
	if r := e.run("weight", "c1", "-5"); r.code != ExitFailure || !strings.Contains(r.stderr, "weight -5 must be in") {
		t.Errorf("%v", r)
	}
	if r := e.run("--timeout", "-1s", "status"); r.code != ExitUsage {
		t.Errorf("%v", r)
	}
}
