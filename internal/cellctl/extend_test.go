package cellctl

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/release"
)

// TestExtensions: a program's commands run as cellctl's own — listed
// in the overview under their section, after cellctl's, with help that
// 'help CMD' and 'CMD -h' print alike, the global flags parsed, a usage
// error exit 2 and an exit code of their own kept — and its deployer is
// the one rollout start asks for --stack.
func TestExtensions(t *testing.T) {
	var stacks []string
	cli := &CLI{Getenv: func(string) string { return "" }, Extensions: Extensions{
		Commands: func() []*Command {
			word := "hello"
			c := &Command{Name: "lab echo", ArgsUsage: "WHAT", Section: "Lab", Summary: "say a word", Help: "Says --word and WHAT.",
				Examples: "cellctl lab echo world", MinArgs: 1, MaxArgs: 1,
				Flags: func(fs *flag.FlagSet) { fs.StringVar(&word, "word", word, "the `WORD` to say") }}
			c.Run = func(_ context.Context, in *Invocation, args []string) error {
				switch args[0] {
				case "usage":
					return Usagef("no %s", args[0])
				case "exit":
					return ExitCode(7, "ended with 7")
				}
				if in.JSON() {
					return WriteJSON(in.Stdout(), map[string]string{word: args[0]})
				}
				fmt.Fprintf(in.Stdout(), "%s %s\n", word, args[0])
				return nil
			}
			return []*Command{c}
		},
		Deployer: func(stack string) (release.Deployer, error) {
			stacks = append(stacks, stack)
			return nil, errors.New("no stack here")
		},
	}}
	run := func(args ...string) result {
		var out, errw bytes.Buffer
		code := cli.Run(context.Background(), args, &out, &errw)
		return result{args: args, stdout: out.String(), stderr: errw.String(), code: code}
	}
	overview := run("help").stdout
	if i, j, k := strings.Index(overview, "\nRelease cell by cell:\n"), strings.Index(overview, "\nLab:\n  lab echo WHAT  say a word\n"), strings.Index(overview, "\nGlobal flags"); i < 0 || j < i || k < j {
		t.Errorf("the overview does not list the extension's section after cellctl's:\n%s", overview)
	}
	h := run("help", "lab", "echo")
	if h.code != ExitOK || !strings.HasPrefix(h.stdout, "Usage: cellctl lab echo WHAT [flags]\n\nSays --word and WHAT.") || !strings.Contains(h.stdout, "--word WORD") ||
		!strings.Contains(h.stdout, "--registry URL") || run("lab", "echo", "-h").stdout != h.stdout {
		t.Errorf("help: %v", h)
	}
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"lab", "echo", "world", "--word", "hi"}, ExitOK, "hi world\n"},
		{[]string{"lab", "echo", "world"}, ExitOK, "hello world\n"}, // a fresh command: no flag from the run before
		{[]string{"--json", "lab", "echo", "world"}, ExitOK, "{\n  \"hello\": \"world\"\n}\n"},
		{[]string{"lab", "echo"}, ExitUsage, ""},
		{[]string{"lab", "echo", "usage"}, ExitUsage, ""},
		{[]string{"lab", "echo", "exit"}, 7, ""},
	} {
		if r := run(tc.args...); r.code != tc.code || r.stdout != tc.out {
			t.Errorf("%v; want exit %d and %q", r, tc.code, tc.out)
		}
	}
	r := run("--registry", "file:"+t.TempDir()+"/map.json", "rollout", "start", "--stack", "/the/stack", "--set", "workers=3")
	if r.code != ExitFailure || r.stderr != "cellctl rollout start: no stack here: pass --stack DIR\n" || len(stacks) != 1 || stacks[0] != "/the/stack" {
		t.Errorf("rollout start through the extension's deployer: %v (asked for %v)", r, stacks)
	}
}
