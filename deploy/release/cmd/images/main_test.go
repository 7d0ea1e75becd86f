package main

import (
	"io"
	"strings"
	"testing"
)

// TestFaultsFlag: --faults makes the image of a fault build only under a
// tag that says so, and never beside --foreign.
func TestFaultsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--faults", "--version", "1.2.3", "cell"}, `needs a --version that holds "-fault-"`},
		{[]string{"--faults", "--version", "1.2.3-failing", "cell"}, `needs a --version that holds "-fault-"`},
		{[]string{"--faults", "--foreign", "--version", "1.2.3-fault-failing", "--revision", "r", "--created", "2026-01-01T00:00:00Z", "nats"}, "no --foreign"},
		{[]string{"--faults", "--version", "1.2.3-fault-failing", "cell"}, ""},
	} {
		o, err := parseFlags(tc.args, io.Discard)
		switch {
		case tc.err == "" && (err != nil || !o.faults):
			t.Errorf("%v: %v, faults %v", tc.args, err, o.faults)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: %v, want %q", tc.args, err, tc.err)
		}
	}
}
