package cellctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// Extensions are what a program adds to cellctl's own commands (through
// CLI.Extensions), the one hook by which cellctl reaches beyond the
// product: the cellctl program adds the local stack's commands and
// deployer (internal/devstack/devctl), which cellctl itself does not
// import.
type Extensions struct {
	// Commands makes the commands added, afresh for every run (their
	// flags' variables are bound in closures, as cellctl's own are).
	Commands func() []*Command
	// Deployer is the deployer of the stack in directory stack (the
	// --stack flag of rollout plan, start, resume and rollback); nil:
	// this cellctl replaces no processes, and those commands refuse.
	Deployer func(stack string) (release.Deployer, error)
}

// Command is a command an extension adds: listed in the overview under
// its Section, with its help, parsed with the global flags like
// cellctl's own, and run by Run.
type Command struct {
	Name      string // "dev up": one word, or a group's word and the command's
	ArgsUsage string // "NAME", "" for none
	Section   string // the overview's heading it is listed under
	Summary   string // one line for the overview
	Help      string // paragraphs for 'cellctl help NAME'
	Examples  string
	MinArgs   int
	MaxArgs   int // -1: no limit
	// Unbounded: the command runs until it is done unless --timeout is
	// given (no DefaultTimeout).
	Unbounded bool
	Flags     func(fs *flag.FlagSet)
	Run       func(ctx context.Context, in *Invocation, args []string) error
}

// command is c as cellctl runs its own.
func (c *Command) command() *command {
	cmd := &command{
		name: c.Name, argsUsage: c.ArgsUsage, section: c.Section, summary: c.Summary, help: c.Help, examples: c.Examples,
		minArgs: c.MinArgs, maxArgs: c.MaxArgs, flags: c.Flags,
		run: func(ctx context.Context, x *inv, args []string) error { return c.Run(ctx, &Invocation{x: x}, args) },
	}
	if c.Unbounded {
		cmd.unbounded = func() bool { return true }
	}
	return cmd
}

// Invocation is one run of an extension's command: its streams, the
// global flags it may read and cellctl's clock, client and holder.
type Invocation struct{ x *inv }

// Stdout is where the command's output goes.
func (in *Invocation) Stdout() io.Writer { return in.x.out }

// Stderr is where its notes and warnings go.
func (in *Invocation) Stderr() io.Writer { return in.x.errw }

// JSON says whether --json asks for JSON instead of tables.
func (in *Invocation) JSON() bool { return in.x.g.json }

// LockWait is --lock-wait.
func (in *Invocation) LockWait() time.Duration { return in.x.g.lockWait }

// Now is cellctl's clock.
func (in *Invocation) Now() time.Time { return in.x.cli.now() }

// HTTP is cellctl's HTTP client (without a global timeout).
func (in *Invocation) HTTP() *http.Client { return in.x.cli.httpClient() }

// Holder describes this run for the registry's writer lock.
func (in *Invocation) Holder() string { return in.x.cli.holder(in.x.cmd.name) }

// Notef prints a progress note on stderr.
func (in *Invocation) Notef(format string, args ...any) { in.x.notef(format, args...) }

// Warnf prints a warning line on stderr.
func (in *Invocation) Warnf(format string, args ...any) { in.x.warnf(format, args...) }

// Usagef is a bad command line: cellctl ends with ExitUsage.
func Usagef(format string, args ...any) error { return usagef(format, args...) }

// ExitCode is a failure that ends cellctl with status code (dev
// supervise ends with its program's).
func ExitCode(code int, msg string) error { return exitStatus{code: code, msg: msg} }

// WriteJSON prints v as indented JSON, as every command's --json does.
func WriteJSON(w io.Writer, v any) error { return writeJSON(w, v) }

// WritePlan prints a map change's plan as the commands that change the
// map do.
func WritePlan(w io.Writer, p *slotmap.Plan) { writePlan(w, p) }

// Table writes aligned columns, as cellctl's tables are.
type Table struct{ t *table }

// NewTable is a table with its header row.
func NewTable(w io.Writer, header ...string) *Table { return &Table{t: newTable(w, header...)} }

// Row writes a row; empty last columns are left out.
func (t *Table) Row(cols ...string) { t.t.row(cols...) }

// Flush writes the table out.
func (t *Table) Flush() { t.t.flush() }

// commands are cellctl's own commands and the extensions', afresh.
func (c *CLI) commands() []*command {
	cmds := commands()
	if c.Extensions.Commands != nil {
		for _, e := range c.Extensions.Commands() {
			cmds = append(cmds, e.command())
		}
	}
	return cmds
}

// deployer is the deployer of the stack in dir, through the extensions'.
func (c *CLI) deployer(dir string) (release.Deployer, error) {
	if c.Extensions.Deployer == nil {
		return nil, fmt.Errorf("this cellctl has no deployer to replace the processes of %s", dir)
	}
	return c.Extensions.Deployer(dir)
}
