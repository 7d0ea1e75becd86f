package images

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Binary is what a Go binary records of its build. (Not its version: the
// linker's -X flags are not recorded in a -trimpath build.)
type Binary struct {
	GOOS, GOARCH string
	Revision     string // vcs.revision, "" if not stamped
	Tags         string // -tags, "" for none
}

// ErrFaultHooks is ReadBinary's refusal of a build with the fault hooks
// (the tag "faults"): such a build goes into no image but a drill's bad
// release, whose tag says so (FaultTag).
var ErrFaultHooks = errors.New("built with the fault hooks (-tags faults): never in an image but a drill's (images --faults)")

// FaultTag is what the tag of an image of a fault build must hold.
const FaultTag = "-fault-"

// Faults says whether b was built with the fault hooks.
func (b Binary) Faults() bool { return slices.Contains(strings.Split(b.Tags, ","), "faults") }

// ReadBinary reads the build of the Go binary at path and checks it is a
// static ELF executable: no interpreter, no shared libraries (an image
// with an empty base has neither a dynamic loader nor a libc), and not a
// build with the fault hooks (ErrFaultHooks, with the binary read).
func ReadBinary(path string) (Binary, error) {
	var b Binary
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return b, err
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "GOOS":
			b.GOOS = s.Value
		case "GOARCH":
			b.GOARCH = s.Value
		case "vcs.revision":
			b.Revision = s.Value
		case "-tags":
			b.Tags = s.Value
		}
	}
	if err := CheckStatic(path); err != nil {
		return b, err
	}
	if b.Faults() {
		return b, fmt.Errorf("%s: %w", path, ErrFaultHooks)
	}
	return b, nil
}

// CheckStatic checks the file at path is a statically linked ELF
// executable: no PT_INTERP program header and no DT_NEEDED entry.
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read only
	var errs []error
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			errs = append(errs, fmt.Errorf("%s: has an interpreter (PT_INTERP): not static (build with CGO_ENABLED=0)", path))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
	}
	if len(libs) > 0 {
		errs = append(errs, fmt.Errorf("%s: needs shared libraries %v: not static (build with CGO_ENABLED=0)", path, libs))
	}
	return errors.Join(errs...)
}

// CheckVersion runs the binary at path with --version, in an empty
// environment, and checks it prints "PROGRAM VERSION (…" first (the
// version is a linker flag, not recorded in the binary's build
// information); it returns that line.
func CheckVersion(path, program, version string) (string, error) {
	bin, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "--version")
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	if want := program + " " + version + " ("; !strings.HasPrefix(line, want) {
		return line, fmt.Errorf("%s --version printed %q, want %q…", path, line, want)
	}
	return line, nil
}
