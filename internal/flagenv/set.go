package flagenv

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/buildinfo"
)

// Set is the flag set of a cellkit server program (router, cell,
// agencysim): its own flags, filled from the environment by the package's
// rule, and two more every such program takes:
//
//   - --version prints the program's build (internal/buildinfo) and ends it.
//   - --check ends it after the flags are read and checked, before any file
//     is opened or any address bound, printing a report of every flag's
//     value and where it came from (command line, the variable's name, or
//     default), the CELLKIT_ variables that set no flag, and the error that
//     would stop the start, if any (see Report).
//
// Both end the program like -h: Parse, or Checked, returns an error that
// wraps flag.ErrHelp after printing to Stdout.
type Set struct {
	*flag.FlagSet
	program        string
	version, check bool
	cmdline        map[string]bool // set once the command line parsed
	origins        map[string]string
	placement      []string // flags that say where the process runs, not what it does

	// Stdout takes --version and the --check report (nil: os.Stdout).
	Stdout io.Writer
	// Environ lists the environment for the report's unused variables (nil:
	// os.Environ).
	Environ func() []string
}

// ErrVersion is returned by Parse after --version printed the build.
var ErrVersion = fmt.Errorf("version printed: %w", flag.ErrHelp)

// ErrChecked is returned by Checked after --check printed a report of a
// configuration the program would start with.
var ErrChecked = fmt.Errorf("configuration checked: %w", flag.ErrHelp)

// NewSet returns program's flag set, printing usage and errors to output.
func NewSet(program string, output io.Writer) *Set {
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.SetOutput(output)
	s := &Set{FlagSet: fs, program: program}
	fs.BoolVar(&s.version, "version", false, "print the version and exit")
	fs.BoolVar(&s.check, "check", false, "check the flags and environment, print every setting with where it came from as JSON, and exit (non-zero if the program would refuse to start); no file is opened, nothing listens")
	return s
}

// Parse parses args (no positional arguments are taken), then fills the
// flags they did not set from the environment (Fill). With --version it
// prints the build and returns ErrVersion.
func (s *Set) Parse(args []string, getenv func(string) string) error {
	if err := s.FlagSet.Parse(args); err != nil {
		return err
	}
	if s.version {
		fmt.Fprintf(s.stdout(), "%s %s\n", s.program, buildinfo.Get())
		return ErrVersion
	}
	s.cmdline = map[string]bool{}
	s.FlagSet.Visit(func(f *flag.Flag) { s.cmdline[f.Name] = true })
	if s.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", s.Args())
	}
	// --version and --check only from the command line: a variable must
	// never turn a server into a program that prints and exits.
	origins, err := FillFrom(s.FlagSet, s.program, getenv, "version", "check")
	s.origins = origins
	return err
}

// Placement names the flags that say where the process runs and who it is
// (addresses, ids, directories, file paths), not what it does: they are
// not part of its release.
func (s *Set) Placement(names ...string) { s.placement = append(s.placement, names...) }

// Settings are "name=value" of every flag but --version, --check and the
// placement ones, in name order, once Parse has filled them: what makes
// the process's release beside its binary.
func (s *Set) Settings() ([]string, error) {
	for _, n := range s.placement {
		if s.Lookup(n) == nil {
			return nil, fmt.Errorf("placement flag --%s is not a flag of %s", n, s.program)
		}
	}
	var out []string
	s.VisitAll(func(f *flag.Flag) {
		if f.Name != "version" && f.Name != "check" && !slices.Contains(s.placement, f.Name) {
			out = append(out, f.Name+"="+f.Value.String())
		}
	})
	return out, nil
}

// Release is the release this process runs: its build and its Settings.
func (s *Set) Release() (api.Release, error) {
	settings, err := s.Settings()
	if err != nil {
		return api.Release{}, err
	}
	return buildinfo.Release(settings)
}

// Checking reports whether --check was given.
func (s *Set) Checking() bool { return s.check }

// Checked ends a --check run: the program calls it with the error its flags
// gave (nil if none), as soon as it has checked them. Without --check it
// returns err unchanged. With --check it prints the Report and returns err,
// or ErrChecked when there is none.
func (s *Set) Checked(err error) error {
	if !s.check || errors.Is(err, flag.ErrHelp) {
		return err
	}
	if s.cmdline == nil { // a command-line error: flag has printed it with the usage
		return err
	}
	r := s.report(err)
	b, jerr := json.MarshalIndent(r, "", "  ")
	if jerr != nil {
		return jerr
	}
	fmt.Fprintf(s.stdout(), "%s\n", b)
	if err != nil {
		return err
	}
	return ErrChecked
}

// Report is what --check prints.
type Report struct {
	Program string `json:"program"`
	// Command is the command of a program that has several (cellctl).
	Command string         `json:"command,omitempty"`
	Build   buildinfo.Info `json:"build"`
	// OK is true when the program would start with these settings (as far
	// as its flags tell: files and addresses are not tried).
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Flags holds every flag but --version and --check, by name.
	Flags map[string]Setting `json:"flags"`
	// Unused lists the CELLKIT_ variables of the environment that set no
	// flag of this program: another program's, a misspelt one, or one that
	// lost to the program's own variable or to the command line.
	Unused []string `json:"unused_variables"`
}

// Setting is one flag's value and where it came from.
type Setting struct {
	Value string `json:"value"`
	// From is "command line", "default" or the variable that set it.
	From string `json:"from"`
}

// report describes the settings after Parse; err is the program's verdict
// on them.
func (s *Set) report(err error) Report {
	environ := s.Environ
	if environ == nil {
		environ = os.Environ
	}
	return Describe(s.FlagSet, s.program, s.cmdline, s.origins, environ(), err, "version", "check")
}

// Describe is the Report of fs, parsed and filled by FillFrom: cmdline
// names the flags the command line set, origins is what FillFrom returned,
// environ the environment ("NAME=value"), err the program's verdict; the
// flags in omit are left out.
func Describe(fs *flag.FlagSet, program string, cmdline map[string]bool, origins map[string]string, environ []string, err error, omit ...string) Report {
	r := Report{Program: program, Build: buildinfo.Get(), OK: err == nil, Flags: map[string]Setting{}, Unused: []string{}}
	if err != nil {
		r.Error = strings.Join(strings.Fields(err.Error()), " ")
	}
	used := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		if slices.Contains(omit, f.Name) {
			return
		}
		from := "default"
		switch {
		case cmdline[f.Name]:
			from = "command line"
		case origins[f.Name] != "":
			from = origins[f.Name]
			used[from] = true
		}
		r.Flags[f.Name] = Setting{Value: f.Value.String(), From: from}
	})
	for _, kv := range environ {
		name, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, Prefix) && v != "" && !used[name] {
			r.Unused = append(r.Unused, name)
		}
	}
	slices.Sort(r.Unused)
	return r
}

func (s *Set) stdout() io.Writer {
	if s.Stdout != nil {
		return s.Stdout
	}
	return os.Stdout
}
