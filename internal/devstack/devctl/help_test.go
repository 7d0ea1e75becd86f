package devctl

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/cellctl"
)

// TestHelp: the cellctl program's overview is cellctl's own with the
// local stack's section before the global flags, listing every dev
// command; each has help with examples, the same from 'cellctl help CMD'
// and 'cellctl CMD -h'.
func TestHelp(t *testing.T) {
	var own bytes.Buffer
	if code := (&cellctl.CLI{Getenv: func(string) string { return "" }}).Run(context.Background(), []string{"help"}, &own, &own); code != cellctl.ExitOK {
		t.Fatalf("cellctl's own help: exit %d\n%s", code, own.String())
	}
	const section = `Local stack:
  dev up                       start the local stack: agency simulator, cells, router (make run)
  dev down                     stop the local stack started by dev up
  dev status                   show whether each process of the local stack is alive and ready
  dev replace NAME             restart or upgrade one process of the local stack or the network lab
  dev certs                    make a local CA and certificates for the router, the cells and operators
  dev supervise -- PROGRAM...  run a program, restarting it with backoff when it ends on its own

`
	want := strings.Replace(own.String(), "Global flags (before", section+"Global flags (before", 1)
	overview := run("help")
	if overview.code != cellctl.ExitOK || overview.stderr != "" || overview.stdout != want {
		t.Fatalf("the program's overview:\n%s\nwant:\n%s", overview, want)
	}
	for _, c := range Extensions().Commands() {
		t.Run(strings.ReplaceAll(c.Name, " ", "_"), func(t *testing.T) {
			if c.Help == "" || c.Examples == "" || c.Summary == "" || c.Section != secDev {
				t.Errorf("%q lacks help, summary or examples, or is not in the local stack's section", c.Name)
			}
			h := run(append([]string{"help"}, strings.Fields(c.Name)...)...)
			if h.code != cellctl.ExitOK || !strings.HasPrefix(h.stdout, "Usage: cellctl "+c.Name) || !strings.Contains(h.stdout, "\nExamples:\n  cellctl dev ") ||
				!strings.Contains(h.stdout, "--registry URL") {
				t.Errorf("%v", h)
			}
			for _, flag := range []string{"-h", "--help"} {
				if r := run(append(strings.Fields(c.Name), flag)...); r.code != cellctl.ExitOK || r.stdout != h.stdout {
					t.Errorf("cellctl %s %s differs from cellctl help %s:\n%v", c.Name, flag, c.Name, r)
				}
			}
		})
	}
	if r := run("help", "dev"); r.code != cellctl.ExitOK || !strings.Contains(r.stdout, "cellctl dev: one of up, down, status, replace, certs, supervise") {
		t.Errorf("%v", r)
	}
}
