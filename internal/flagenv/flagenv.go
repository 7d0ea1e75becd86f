// Package flagenv fills a program's command-line flags from the
// environment, with one rule for every cellkit program (router, cell,
// cellctl, loadtest, agencysim):
//
// A flag --foo-bar that is not on the command line takes its value from
// CELLKIT_<PROGRAM>_FOO_BAR, or, when that is unset, from CELLKIT_FOO_BAR:
// the name in upper case with '-' as '_', the program's own variable first.
// An empty variable counts as unset. A value the flag refuses is an error
// that names the variable. The command line always wins.
//
// The program's variable sets one program only (CELLKIT_ROUTER_LISTEN); the
// shared one reaches every program with that flag (CELLKIT_REGISTRY for the
// router, the cells and cellctl alike).
package flagenv

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Prefix starts every variable.
const Prefix = "CELLKIT_"

// Names returns the variables that set flag name of program, in the order
// they are read: CELLKIT_<PROGRAM>_<FLAG>, then CELLKIT_<FLAG>.
func Names(program, name string) []string {
	upper := func(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }
	return []string{Prefix + upper(program) + "_" + upper(name), Prefix + upper(name)}
}

// Fill sets every flag of fs that the command line did not set (call it
// after fs.Parse) from the first of its variables (see Names) that is set.
// getenv reads the environment; nil means os.Getenv. The first value a
// flag refuses is returned as an error, on one line, naming the variable.
func Fill(fs *flag.FlagSet, program string, getenv func(string) string) error {
	_, err := FillFrom(fs, program, getenv)
	return err
}

// FillFrom is Fill, returning the variable that set each flag it set (for
// Describe). The flags named in skip are never read from the environment.
func FillFrom(fs *flag.FlagSet, program string, getenv func(string) string, skip ...string) (map[string]string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	origins := map[string]string{}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] || slices.Contains(skip, f.Name) {
			return
		}
		for _, env := range Names(program, f.Name) {
			v := getenv(env)
			if v == "" {
				continue
			}
			if e := fs.Set(f.Name, v); e != nil {
				msg := strings.Join(strings.Fields(e.Error()), " ")
				err = fmt.Errorf("%s=%q: invalid value for --%s: %s", env, v, f.Name, msg)
			}
			origins[f.Name] = env
			return
		}
	})
	return origins, err
}
