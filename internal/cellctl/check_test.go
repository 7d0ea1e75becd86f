package cellctl

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/flagenv"
)

// TestCheck: --check reports a command's settings and where they came
// from, and changes nothing.
func TestCheck(t *testing.T) {
	e := newFileEnv(t)
	env := map[string]string{
		"CELLKIT_CELLCTL_TLS_CA": "/etc/ca.pem", // cellctl's own
		"CELLKIT_TIMEOUT":        "5s",          // shared
		"CELLKIT_CELLCTL_CHECK":  "true",        // never read
	}
	e.cli.Getenv = func(k string) string { return env[k] }
	r := e.run("provision", "c1", "--intake", "http://c1:8081", "--check")
	if r.code != ExitOK {
		t.Fatalf("%v", r)
	}
	var rep flagenv.Report
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("%v: %v", r, err)
	}
	if e.raw() != nil {
		t.Errorf("--check wrote a map")
	}
	want := map[string]flagenv.Setting{
		"intake":   {Value: "http://c1:8081", From: "command line"},
		"registry": {Value: e.url, From: "command line"},
		"tls-ca":   {Value: "/etc/ca.pem", From: "CELLKIT_CELLCTL_TLS_CA"},
		"timeout":  {Value: "5s", From: "CELLKIT_TIMEOUT"},
		"weight":   {Value: "1", From: "default"},
	}
	for name, w := range want {
		if rep.Flags[name] != w {
			t.Errorf("%s = %+v, want %+v", name, rep.Flags[name], w)
		}
	}
	if _, ok := rep.Flags["check"]; ok || rep.Program != "cellctl" || rep.Command != "provision" || !rep.OK {
		t.Errorf("report %+v", rep)
	}
	if w := []string{"CELLKIT_CELLCTL_CHECK"}; !slices.Equal(rep.Unused, w) {
		t.Errorf("unused %q, want %q", rep.Unused, w)
	}

	// Global flags before the command count as much as after it (the TLS
	// ones too).
	r = e.run("--tls-ca", "/etc/top-ca.pem", "--tls-cert", "/etc/op.pem", "--tls-key", "/etc/op-key.pem", "status", "--check")
	rep = flagenv.Report{}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v: %v", r, err)
	}
	for name, v := range map[string]string{"tls-ca": "/etc/top-ca.pem", "tls-cert": "/etc/op.pem", "tls-key": "/etc/op-key.pem"} {
		if w := (flagenv.Setting{Value: v, From: "command line"}); rep.Flags[name] != w {
			t.Errorf("%s before the command = %+v, want %+v", name, rep.Flags[name], w)
		}
	}

	// A refusal of the flags is the report's error and exit status 2.
	r = e.run("provision", "--check")
	if r.code != ExitUsage || !strings.Contains(r.stdout, `"ok": false`) || !strings.Contains(r.stdout, "want CELL, got 0 arguments") {
		t.Errorf("%v", r)
	}
	env["CELLKIT_TIMEOUT"] = "soon"
	r = e.run("status", "--check")
	if r.code != ExitUsage || !strings.Contains(r.stdout, "CELLKIT_TIMEOUT") {
		t.Errorf("%v", r)
	}
}
