package cellctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// command is one cellctl command. A fresh set is built for every Run, so
// flag variables bound in closures never leak between runs.
type command struct {
	name      string // "drain", "map show"
	argsUsage string // "CELL", "" for none
	summary   string // one line for the overview
	help      string // paragraphs for 'cellctl help NAME'
	examples  string
	section   string
	minArgs   int
	maxArgs   int  // -1: no limit
	mutates   bool // takes --dry-run and the writer lock
	// moves: the command runs data moves (it can give users another
	// cell): it takes --move-rate and the flag named by leave [leave-data;
	// remove: force; "-": none] that changes the map even when a cell
	// whose users move does not answer (leaveData).
	moves     bool
	leave     string
	leaveData bool
	moveRate  int
	dryRun    bool
	hidden    bool // an alias, not listed in the overview
	flags     func(fs *flag.FlagSet)
	// unbounded reports whether the command runs until done unless --timeout
	// is given (drain --wait). Nil means no.
	unbounded func() bool
	run       func(ctx context.Context, x *inv, args []string) error
}

// Sections of the overview, in order.
const (
	secMap     = "Change the map"
	secInspect = "Inspect"
	secCells   = "Operate cells"
)

func commands() []*command {
	return []*command{
		initCommand(), provisionCommand(), drainCommand(), undrainCommand(),
		weightCommand(), rebalanceCommand(), endpointsCommand(), removeCommand(),
		instanceSetCommand(), instanceStateCommand(true), instanceStateCommand(false), instanceRemoveCommand(),
		overrideSetCommand(), overrideClearCommand(),
		quotaSetCommand(), quotaClearCommand(), quotaLimitCommand(), capacityCommand(), mapFormatCommand(),

		mapShowCommand(), mapLookupCommand(), mapDiffCommand(), mapHistoryCommand(),
		overrideListCommand(), quotaShowCommand("quota", false), quotaShowCommand("quota show", true),
		verifyCommand(), versionCommand(), consoleCommand(),

		statusCommand(), failedListCommand(), failedRetryCommand(), circuitCommand(), layoutCommand(), hotkeysCommand(),

		rolloutPlanCommand(), rolloutStartCommand(), rolloutStatusCommand(), rolloutPauseCommand(),
		rolloutResumeCommand(), rolloutAbortCommand(), rolloutRollbackCommand(), rolloutGateCommand(),

		moveStatusCommand(), moveResumeCommand(),
	}
}

// lookup finds the command named by the first one or two words of args and
// returns how many words it took.
func lookup(cmds []*command, args []string) (*command, int) {
	if len(args) >= 2 {
		for _, c := range cmds {
			if c.name == args[0]+" "+args[1] {
				return c, 2
			}
		}
	}
	for _, c := range cmds {
		if c.name == args[0] {
			return c, 1
		}
	}
	return nil, 0
}

// group lists the subcommands of a two-word command group ("map"), or nil.
func group(cmds []*command, word string) []string {
	var subs []string
	for _, c := range cmds {
		if first, sub, ok := strings.Cut(c.name, " "); ok && first == word && !c.hidden {
			subs = append(subs, sub)
		}
	}
	return subs
}

func (x *inv) help(cmds []*command, args []string) int {
	if len(args) == 0 {
		writeOverview(x.out, cmds)
		return ExitOK
	}
	cmd, n := lookup(cmds, args)
	if cmd == nil || n != len(args) {
		if grp := group(cmds, args[0]); grp != nil && len(args) == 1 {
			fmt.Fprintf(x.out, "cellctl %s: one of %s\n\n", args[0], strings.Join(grp, ", "))
			for _, c := range cmds {
				if strings.HasPrefix(c.name, args[0]+" ") && !c.hidden {
					fmt.Fprintf(x.out, "  %-42s %s\n", "cellctl "+c.name+" "+c.argsUsage, c.summary)
				}
			}
			return ExitOK
		}
		return x.fail("cellctl help", usagef("unknown command %q (see 'cellctl help')", strings.Join(args, " ")))
	}
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	cmd.register(fs)
	writeHelp(x.out, cmd, fs)
	return ExitOK
}

// writeOverview prints the list of commands: cellctl's own sections,
// then the extensions', in the order their commands come.
func writeOverview(w io.Writer, cmds []*command) {
	fmt.Fprint(w, `cellctl operates cellkit cells: it changes the cell map in the registry
(always showing the plan first) and talks to the cells' admin APIs.

Usage: cellctl [global flags] COMMAND [ARGS] [flags]
`)
	sections := []string{secMap, secInspect, secCells, secRollout}
	for _, c := range cmds {
		if !slices.Contains(sections, c.section) {
			sections = append(sections, c.section)
		}
	}
	for _, sec := range sections {
		fmt.Fprintf(w, "\n%s:\n", sec)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, c := range cmds {
			if c.section == sec && !c.hidden {
				fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(c.name+" "+c.argsUsage), c.summary)
			}
		}
		tw.Flush()
	}
	fmt.Fprint(w, "\n"+globalFlagsHelp+`
A local stack to try this on: 'make run' (or 'cellctl dev up').
Run 'cellctl help COMMAND' (or 'cellctl COMMAND -h') for a command's flags and examples.
`)
}

// writeHelp prints one command's help.
func writeHelp(w io.Writer, cmd *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: cellctl %s\n\n", strings.TrimSpace(cmd.name+" "+cmd.argsUsage+" [flags]"))
	fmt.Fprintf(w, "%s\n", strings.TrimSpace(cmd.help))
	var lines []string
	fs.VisitAll(func(f *flag.Flag) {
		if slices.Contains(globalNames, f.Name) {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		left := "--" + f.Name
		if name != "" {
			left += " " + name
		}
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" && def != "[]" {
			usage += fmt.Sprintf(" (default %s)", def)
		}
		lines = append(lines, fmt.Sprintf("  %-20s %s", left, usage))
	})
	if len(lines) > 0 {
		slices.Sort(lines)
		fmt.Fprintf(w, "\nFlags:\n%s\n", strings.Join(lines, "\n"))
	}
	if cmd.examples != "" {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, l := range strings.Split(strings.Trim(cmd.examples, "\n"), "\n") {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	fmt.Fprintf(w, "\n%s", globalFlagsHelp)
}

// parseInterspersed parses flags wherever they appear among the positional
// arguments (as kubectl and consul do), and returns the positional ones.
// Everything after "--" is positional; so is a negative number.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, tail = args[:i], args[i+1:]
	}
	var pos []string
	for {
		// A negative number is an argument, not a flag ("weight c1 -1").
		for len(args) > 0 && isNegativeNumber(args[0]) {
			pos = append(pos, args[0])
			args = args[1:]
		}
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	return append(pos, tail...), nil
}

func isNegativeNumber(s string) bool {
	if len(s) < 2 || s[0] != '-' {
		return false
	}
	for _, c := range s[1:] {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

// register adds the command's flags to fs: --dry-run, --move-rate and
// --leave-data where they apply, then its own.
func (c *command) register(fs *flag.FlagSet) {
	if c.mutates {
		fs.BoolVar(&c.dryRun, "dry-run", false, "print the plan, change nothing")
	}
	if c.moves {
		fs.IntVar(&c.moveRate, "move-rate", 0, "copy at most `N` messages a second per data move (0: as fast as the cells take them), sparing the cells' stores under load")
		switch c.leave {
		case "":
			fs.BoolVar(&c.leaveData, "leave-data", false, "change the map even when a cell whose users move does not answer: their inquiries stay in that cell (read there through the users' new cell); without it such a change is refused")
		case "force":
			fs.BoolVar(&c.leaveData, "force", false, "remove the cell even when it does not answer: what it still holds is lost")
		}
	}
	if c.flags != nil {
		c.flags(fs)
	}
}
