package flagenv

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNames(t *testing.T) {
	tests := []struct {
		program, flag string
		want          []string
	}{
		{"router", "cell-timeout", []string{"CELLKIT_ROUTER_CELL_TIMEOUT", "CELLKIT_CELL_TIMEOUT"}},
		{"cell", "age-budget", []string{"CELLKIT_CELL_AGE_BUDGET", "CELLKIT_AGE_BUDGET"}},
		{"cellctl", "registry", []string{"CELLKIT_CELLCTL_REGISTRY", "CELLKIT_REGISTRY"}},
		{"agencysim", "nice-listen", []string{"CELLKIT_AGENCYSIM_NICE_LISTEN", "CELLKIT_NICE_LISTEN"}},
	}
	for _, tt := range tests {
		if got := Names(tt.program, tt.flag); !slices.Equal(got, tt.want) {
			t.Errorf("Names(%q, %q) = %q, want %q", tt.program, tt.flag, got, tt.want)
		}
	}
}

// flags is a flag set like a program's, parsed from args.
type flags struct {
	fs      *flag.FlagSet
	listen  *string
	timeout *time.Duration
	workers *int
	verbose *bool
}

func parse(t *testing.T, args ...string) flags {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := flags{
		fs:      fs,
		listen:  fs.String("listen", "127.0.0.1:8080", ""),
		timeout: fs.Duration("cell-timeout", 5*time.Second, ""),
		workers: fs.Int("workers", 64, ""),
		verbose: fs.Bool("verbose", false, ""),
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFill(t *testing.T) {
	env := map[string]string{
		"CELLKIT_ROUTER_LISTEN":       "0.0.0.0:9999", // the program's own
		"CELLKIT_LISTEN":              "127.0.0.1:1",  // loses to it
		"CELLKIT_CELL_TIMEOUT":        "2s",           // shared
		"CELLKIT_ROUTER_WORKERS":      "",             // empty: unset
		"CELLKIT_WORKERS":             "9",
		"CELLKIT_ROUTER_VERBOSE":      "true",
		"CELLKIT_CELL_CELL_TIMEOUT":   "1h", // another program's
		"CELLKIT_ROUTER_CELL_MISSING": "x",  // no such flag: ignored
	}
	f := parse(t, "--workers", "12")
	if err := Fill(f.fs, "router", func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if *f.listen != "0.0.0.0:9999" || *f.timeout != 2*time.Second || *f.workers != 12 || !*f.verbose {
		t.Errorf("listen %q, cell-timeout %v, workers %d, verbose %v; want 0.0.0.0:9999 (program's variable), 2s (shared), 12 (command line), true",
			*f.listen, *f.timeout, *f.workers, *f.verbose)
	}

	f = parse(t)
	if err := Fill(f.fs, "router", func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if *f.listen != "127.0.0.1:8080" || *f.timeout != 5*time.Second || *f.workers != 64 || *f.verbose {
		t.Errorf("without variables the defaults changed: %q %v %d %v", *f.listen, *f.timeout, *f.workers, *f.verbose)
	}
}

func TestFillRefusesABadValueNamingTheVariable(t *testing.T) {
	for _, tt := range []struct{ env, value string }{
		{"CELLKIT_ROUTER_CELL_TIMEOUT", "soon"},
		{"CELLKIT_WORKERS", "many"},
		{"CELLKIT_VERBOSE", "perhaps"},
	} {
		f := parse(t)
		err := Fill(f.fs, "router", func(k string) string {
			if k == tt.env {
				return tt.value
			}
			return ""
		})
		if err == nil || !strings.HasPrefix(err.Error(), tt.env+"=") || strings.Contains(err.Error(), "\n") {
			t.Errorf("Fill with %s=%q = %v, want one line naming the variable", tt.env, tt.value, err)
		}
	}
}
