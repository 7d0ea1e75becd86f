// Package cellctl is the operator's control plane for cellkit: the commands
// of the cellctl program, which change the cell map in the registry and talk
// to the cells' admin APIs.
//
// Guarantees:
//   - Every command that changes the map prints its plan (slot moves as
//     ranges, the share of users that move, slots and session quotas per
//     cell before → after) before it applies it, and --dry-run stops there.
//   - A change is applied with a compare-and-swap on the map version while the
//     registry's writer lock is held. A lost race is re-planned against the
//     new map (up to 3 times), never overwritten; a refused change (unknown
//     cell, last active cell, quota over the limit, bad weight or URL...)
//     writes nothing.
//   - Exit status 0 is success, 1 a failure or refusal, 2 a usage error; a
//     failure is one line on stderr.
//
// Run is the whole program; cellctl/main.go wires it to the process and
// adds the local stack's commands and deployer (CLI.Extensions), which
// belong to the lab, not to this package.
package cellctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/flagenv"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// Exit statuses.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// EnvAdminToken names the environment variable holding the bearer token sent
// to cells' and routers' admin APIs when --admin-token is not given: the
// flag's shared variable (see internal/flagenv). Cells and routers take
// their tokens from a file (--admin-token-file, CELLKIT_ADMIN_TOKEN_FILE).
const EnvAdminToken = adminclient.EnvToken

// DefaultTimeout bounds a command (registry calls, lock wait, admin calls)
// unless --timeout says otherwise. `drain --wait` has no default bound.
const DefaultTimeout = control.DefaultTimeout

// CLI holds what cellctl takes from its environment. The zero value uses the
// real ones; tests replace them.
type CLI struct {
	// Now is the clock: it stamps committed maps and measures ages.
	// Nil means time.Now.
	Now func() time.Time
	// Getenv reads the environment. Nil means os.Getenv.
	Getenv func(string) string
	// OpenRegistry opens a registry URL (already resolved from the flag or
	// CELLKIT_REGISTRY). Nil means registry.Open.
	OpenRegistry func(url string) (registry.Registry, error)
	// HTTP talks to admin APIs. Nil means a client without a global timeout
	// (every call carries a deadline of its own).
	HTTP *http.Client
	// Terminal reports whether w is an interactive terminal, where progress
	// lines overwrite themselves. Nil means: w is an *os.File on a character
	// device.
	Terminal func(w io.Writer) bool
	// Extensions are the program's commands and deployer added to
	// cellctl's own (the cellctl program's: the local stack's).
	Extensions Extensions
}

// Run runs cellctl, with its own commands only, with args (without the
// program name) and returns the exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return (&CLI{}).Run(ctx, args, stdout, stderr)
}

func (c *CLI) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *CLI) getenv(k string) string {
	if c.Getenv != nil {
		return c.Getenv(k)
	}
	return os.Getenv(k)
}

func (c *CLI) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *CLI) terminal(w io.Writer) bool {
	if c.Terminal != nil {
		return c.Terminal(w)
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// globals are the flags every command takes.
type globals struct {
	registry       string
	json           bool
	timeout        time.Duration
	lockWait       time.Duration
	adminToken     string
	adminTokenFile string
	routers        string              // routers' admin URLs, comma-separated, for traffic projections
	tls            tlsconf.ClientFiles // for the admin APIs
	check          bool                // print the settings and stop
}

// globalNames are the global flags' names, which a command's help leaves
// to the global flags' text.
var globalNames = []string{"registry", "json", "timeout", "lock-wait", "admin-token", "admin-token-file", "routers", "tls-ca", "tls-cert", "tls-key", "check"}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.registry, "registry", g.registry, "")
	fs.BoolVar(&g.json, "json", g.json, "")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "")
	fs.DurationVar(&g.lockWait, "lock-wait", g.lockWait, "")
	fs.StringVar(&g.adminToken, "admin-token", g.adminToken, "")
	fs.StringVar(&g.adminTokenFile, "admin-token-file", g.adminTokenFile, "")
	fs.StringVar(&g.routers, "routers", g.routers, "")
	fs.BoolVar(&g.check, "check", g.check, "")
	// The TLS flags' names are tlsconf's, as in every program; their
	// values, like the others', are kept from an earlier FlagSet by
	// Run (Visit and Set).
	g.tls.RegisterFlags(fs, "", "the cells' admin APIs")
}

const globalFlagsHelp = `Global flags (before or after the command):
  --registry URL       the registry: file:PATH or consul://HOST:PORT/PREFIX
                       (default $CELLKIT_REGISTRY)
  --json               print JSON for machines instead of tables
  --timeout D          give up after D (default 30s; drain --wait: no limit);
                       the time a change's data moves spend at the cells
                       is not counted (each call to a cell: at most 2m)
  --lock-wait D        wait at most D for the registry's writer lock (default:
                       as long as --timeout allows)
  --admin-token TOKEN  bearer token for admin APIs (default $CELLKIT_ADMIN_TOKEN)
  --admin-token-file F the bearer token read from file F instead
  --routers URLS       the routers' admin URLs, comma-separated (default
                       $CELLKIT_ROUTERS, else the routers announced in the
                       registry): plans project the traffic they measured
                       onto every cell (REQ/S, CAPACITY)
  --tls-ca F           CA file (PEM) the admin APIs' certificates are verified by
                       (https URLs in the map; default: the system's roots)
  --tls-cert F         client certificate (PEM) for admin APIs that require
                       one (mutual TLS: the cells' take an operator's)
  --tls-key F          its private key (PEM)
  --check              check the command's flags and environment, print every
                       setting with where it came from as JSON, and stop
                       (exit 2 if the command would refuse them): nothing is
                       read, written or asked
  -h, --help           help for the command

A flag not on the command line is read from CELLKIT_CELLCTL_<FLAG>, else
CELLKIT_<FLAG> (upper case, '-' as '_').
`

// inv is one invocation: the parsed globals, the streams and the command.
type inv struct {
	cli     *CLI
	g       globals
	out     io.Writer
	errw    io.Writer
	cmd     *command
	timeout bool // --timeout was given explicitly

	given      map[string]bool // the flags on the command line (not from the environment)
	adminHTTP  *http.Client    // with --tls-*: their TLS configuration
	certAsked  *atomic.Bool    // with --tls-* but no certificate: a server asked for one
	adminToken string          // --admin-token, or --admin-token-file's content
	measured   *measured       // the routers' traffic, once asked (see traffic)
}

// usageError is a bad command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{msg: fmt.Sprintf(format, args...)}
}

// Run runs one command line; see the package Run.
func (c *CLI) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	x := &inv{cli: c, out: stdout, errw: stderr, g: globals{timeout: DefaultTimeout}}
	top := flag.NewFlagSet("cellctl", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	x.g.register(top)
	version := top.Bool("version", false, "")
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeOverview(stdout, c.commands())
			return ExitOK
		}
		return x.fail("cellctl", usagef("%v (see 'cellctl help')", err))
	}
	rest := top.Args()
	if *version {
		rest = []string{"version"}
	}
	if len(rest) == 0 {
		writeOverview(stderr, c.commands())
		return ExitUsage
	}
	top.Visit(func(f *flag.Flag) {
		if f.Name == "timeout" {
			x.timeout = true
		}
	})

	cmds := c.commands()
	if rest[0] == "help" {
		return x.help(cmds, rest[1:])
	}
	cmd, n := lookup(cmds, rest)
	if cmd == nil {
		if grp := group(cmds, rest[0]); grp != nil {
			return x.fail("cellctl "+rest[0], usagef("want one of: %s (see 'cellctl help %s')", strings.Join(grp, ", "), rest[0]))
		}
		return x.fail("cellctl", usagef("unknown command %q (see 'cellctl help')", rest[0]))
	}
	x.cmd = cmd
	name := "cellctl " + cmd.name

	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	x.g.register(fs)
	cmd.register(fs)
	pos, err := parseInterspersed(fs, rest[n:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeHelp(stdout, cmd, fs)
			return ExitOK
		}
		return x.fail(name, usagef("%v (see 'cellctl help %s')", err, cmd.name))
	}
	// Global flags given before the command are given too; the others come
	// from the environment if set there.
	top.Visit(func(f *flag.Flag) { _ = fs.Set(f.Name, f.Value.String()) }) // parsed once already: a valid value
	x.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { x.given[f.Name] = true })
	// --check, --leave-data and --force only from the command line: a
	// variable must never turn every command into a printout, nor every
	// change into one that leaves users' inquiries behind.
	origins, err := flagenv.FillFrom(fs, "cellctl", c.getenv, "check", "leave-data", "force")
	if x.g.check {
		return x.check(fs, origins, err, pos)
	}
	if err != nil {
		return x.fail(name, usageError{msg: err.Error()})
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "timeout" {
			x.timeout = true
		}
	})
	if err := x.validate(pos, " (see 'cellctl help "+cmd.name+"')"); err != nil {
		return x.fail(name, err)
	}
	closeAdmin, err := x.setupAdmin()
	if err != nil {
		return x.fail(name, err)
	}
	defer closeAdmin()

	// The command's deadline: --timeout, or DefaultTimeout unless the
	// command waits for as long as it takes (drain --wait) and no
	// --timeout was given. Zero means none.
	// The clock stops while a data move's steps run at the cells (hold).
	if d := x.g.timeout; d > 0 && (x.timeout || cmd.unbounded == nil || !cmd.unbounded()) {
		dl, stop := control.WithDeadline(ctx, d)
		defer stop()
		ctx = dl
	}
	if err := cmd.run(ctx, x, pos); err != nil {
		return x.fail(name, err)
	}
	return ExitOK
}

// validate checks what Run checks once the flags are read: the number of
// arguments (its message ending with hint) and --timeout.
func (x *inv) validate(pos []string, hint string) error {
	if len(pos) < x.cmd.minArgs || (x.cmd.maxArgs >= 0 && len(pos) > x.cmd.maxArgs) {
		return usagef("%s%s", argCountMsg(x.cmd, len(pos)), hint)
	}
	if x.g.timeout < 0 {
		return usagef("--timeout %v must not be negative", x.g.timeout)
	}
	return nil
}

// check prints the --check report of the command's settings: those that
// are flags; err is what filling them from the environment returned.
func (x *inv) check(fs *flag.FlagSet, origins map[string]string, err error, pos []string) int {
	if err == nil {
		err = x.validate(pos, "")
	}
	environ := os.Environ()
	if x.cli.Getenv != nil {
		environ = nil // a test's environment: only what it names
		fs.VisitAll(func(f *flag.Flag) {
			for _, name := range flagenv.Names("cellctl", f.Name) {
				if v := x.cli.Getenv(name); v != "" {
					environ = append(environ, name+"="+v)
				}
			}
		})
	}
	r := flagenv.Describe(fs, "cellctl", x.given, origins, environ, err, "check")
	r.Command = x.cmd.name
	if werr := writeJSON(x.out, r); werr != nil {
		return x.fail("cellctl "+x.cmd.name, werr)
	}
	if err != nil {
		return ExitUsage
	}
	return ExitOK
}

func argCountMsg(cmd *command, got int) string {
	want := cmd.argsUsage
	if want == "" {
		return fmt.Sprintf("takes no arguments, got %d", got)
	}
	return fmt.Sprintf("want %s, got %d argument%s", want, got, plural(got))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// exitStatus is a failure with an exit status of its own (dev supervise
// ends with its program's).
type exitStatus struct {
	code int
	msg  string
}

func (e exitStatus) Error() string { return e.msg }

// fail prints err as one line and returns its exit status.
func (x *inv) fail(name string, err error) int {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	fmt.Fprintf(x.errw, "%s: %s\n", name, msg)
	var u usageError
	var st exitStatus
	switch {
	case errors.As(err, &u):
		return ExitUsage
	case errors.As(err, &st):
		return st.code
	}
	return ExitFailure
}

// warnf prints a warning line on stderr; the command goes on.
func (x *inv) warnf(format string, args ...any) {
	fmt.Fprintf(x.errw, "warning: "+format+"\n", args...)
}

// notef prints a progress note on stderr (kept off stdout so that --json
// output stays one document).
func (x *inv) notef(format string, args ...any) {
	fmt.Fprintf(x.errw, format+"\n", args...)
}

// openRegistry opens the registry named by --registry (or CELLKIT_REGISTRY,
// through the flag).
func (x *inv) openRegistry() (registry.Registry, error) {
	url := x.g.registry
	if url == "" {
		return nil, usagef("no registry: pass --registry URL or set %s (file:PATH or consul://HOST:PORT/PREFIX)", registry.EnvRegistry)
	}
	open := x.cli.OpenRegistry
	if open == nil {
		open = func(u string) (registry.Registry, error) {
			return registry.Open(registry.Config{URL: u}, registry.Options{})
		}
	}
	reg, err := open(url)
	if err != nil {
		return nil, usageError{msg: err.Error()}
	}
	return reg, nil
}

// load reads the map, turning registry errors into messages that say which
// registry failed and what to do.
func (x *inv) load(ctx context.Context, reg registry.Registry) (*slotmap.Map, error) {
	m, err := reg.Load(ctx)
	if err != nil {
		return nil, registryError(reg, err)
	}
	return m, nil
}

// registryError explains a failed registry call.
func registryError(reg registry.Registry, err error) error { return control.Explain(reg, err) }

// holder describes this run for the writer lock.
func (c *CLI) holder(cmd string) string { return control.Holder("cellctl " + cmd) }
