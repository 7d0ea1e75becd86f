package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunDispatches(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantOut string // in stdout
		wantErr string // in the error; "" for none
	}{
		{nil, "loadtest run", ""},
		{[]string{"help"}, "loadtest drill kill|drain|agency-slow", ""},
		{[]string{"drill"}, "'loadtest drill kill -h' lists the flags", ""},
		{[]string{"drill", "flood"}, "", `unknown drill "flood"`},
		{[]string{"run", "--key", "k"}, "", "give --rate and --duration, or --steps"},
		{[]string{"bench"}, "", `unknown command "bench"`},
		{[]string{"net"}, "loadtest net up|down|status", ""},
		{[]string{"net", "sideways"}, "", `unknown net command "sideways"`},
		{[]string{"net", "up", "--cells", "0"}, "", "--cells 0: want 1 to 99"},
		{[]string{"net", "up", "--subnet", "lab"}, "", `--subnet "lab": want an IPv4 CIDR`},
		{[]string{"net", "down", "extra"}, "", `unexpected arguments ["extra"]`},
		{[]string{"net", "status", "--dir", "/nonexistent"}, "", "no stack in /nonexistent"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), tc.args, &out, &errb)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("run(%q) = %v, want error %q", tc.args, err, tc.wantErr)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("run(%q) printed %q, want %q in it", tc.args, out.String(), tc.wantOut)
			}
		})
	}
}
