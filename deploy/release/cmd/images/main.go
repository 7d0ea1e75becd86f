// Command images builds the OCI images of cellkit's programs from their
// static binaries, without a container engine (package images): one tar
// per program, both an OCI image layout and a docker-archive.
//
//	images [flags] [PROGRAM...]    (default: router cell cellctl agencysim operator)
//
// `make images` builds the binaries into bin/static and runs it from
// deploy/release. Each binary must be a static linux binary for --arch
// stamped with --revision (go build -buildvcs=true), and when it can run
// here its `--version` must name --version; else nothing is written for it. The version and revision default to
// git's (git describe --tags --always --dirty, git rev-parse HEAD), the
// creation time to $SOURCE_DATE_EPOCH, else the commit's time, so the
// same commit gives the same images.
//
// It prints one line per image: the tarball, the image's name, the
// manifest's digest and the tarball's size.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellkit/cellkit/deploy/release/images"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "images:", err)
		}
		os.Exit(1)
	}
}

type options struct {
	bin, out                  string
	version, revision, source string
	created                   string
	repo, arch                string
	programs                  []images.Program
	foreign, faults           bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "../../bin/static", "directory of the programs' static binaries")
	fs.StringVar(&o.out, "out", "../../bin/images", "directory to write PROGRAM.tar into")
	fs.StringVar(&o.version, "version", "", "the version the binaries were built with, the images' tag (default: git describe --tags --always --dirty)")
	fs.StringVar(&o.revision, "revision", "", "the full commit the binaries were built from (default: git rev-parse HEAD)")
	fs.StringVar(&o.created, "created", "", "the images' creation time, RFC 3339 (default: $SOURCE_DATE_EPOCH, else the commit's time)")
	fs.StringVar(&o.source, "source", "https://github.com/cellkit/cellkit", "the source repository's URL (label org.opencontainers.image.source)")
	fs.StringVar(&o.repo, "repo", "cellkit", "the repository the images are named in: REPO/PROGRAM:VERSION")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "the GOARCH the binaries were built for")
	fs.BoolVar(&o.foreign, "foreign", false, "build images of others' programs ("+foreignNames()+"): static ELF binaries, checked only for that; --version and --revision name their source's release")
	fs.BoolVar(&o.faults, "faults", false, "build the image of a cell built with the fault hooks (-tags faults), a drill's bad release; refused for any other build, and its --version must hold \""+images.FaultTag+"\"")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: images [flags] [PROGRAM...]  (default: all of them)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	names := fs.Args()
	if o.faults && (o.foreign || !strings.Contains(o.version, images.FaultTag)) {
		return o, fmt.Errorf("--faults: the image of a build with the fault hooks needs a --version that holds %q, and no --foreign", images.FaultTag)
	}
	if o.foreign {
		if len(names) == 0 || o.version == "" || o.revision == "" || o.created == "" {
			return o, errors.New("--foreign needs the programs, --version, --revision and --created of their source")
		}
		for _, n := range names {
			i := slices.IndexFunc(images.Foreign, func(p images.Program) bool { return p.Name == n })
			if i < 0 {
				return o, fmt.Errorf("unknown foreign program %q (%s)", n, foreignNames())
			}
			o.programs = append(o.programs, images.Foreign[i])
		}
		return o, nil
	}
	if len(names) == 0 {
		o.programs = images.Programs
	}
	for _, n := range names {
		p, ok := images.LookupProgram(n)
		if !ok {
			return o, fmt.Errorf("unknown program %q", n)
		}
		o.programs = append(o.programs, p)
	}
	return o, nil
}

func foreignNames() string {
	var ns []string
	for _, p := range images.Foreign {
		ns = append(ns, p.Name)
	}
	return strings.Join(ns, ", ")
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.version == "" {
		if o.version, err = git("describe", "--tags", "--always", "--dirty"); err != nil {
			return err
		}
	}
	if o.revision == "" {
		if o.revision, err = git("rev-parse", "HEAD"); err != nil {
			return err
		}
	}
	created, err := createdTime(o.created)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	for _, p := range o.programs {
		s := images.Spec{
			Program:  p,
			Binary:   filepath.Join(o.bin, p.Name),
			Version:  o.version,
			Revision: o.revision,
			Source:   o.source,
			Created:  created,
			Arch:     o.arch,
			Repo:     o.repo,
		}
		build := buildOne
		switch {
		case o.foreign:
			build = buildForeign
		case o.faults:
			build = buildFaults
		}
		w, err := build(s, filepath.Join(o.out, p.Name+".tar"))
		if err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		fmt.Fprintln(stdout, w)
	}
	return nil
}

// buildOne checks the binary of s was built as s says, builds its image
// and writes it to dst.
func buildOne(s images.Spec, dst string) (images.Written, error) {
	b, err := images.ReadBinary(s.Binary)
	if err != nil {
		return images.Written{}, err
	}
	return checkAndWrite(s, b, dst)
}

// buildFaults is buildOne for a build with the fault hooks, which it
// must be.
func buildFaults(s images.Spec, dst string) (images.Written, error) {
	b, err := images.ReadBinary(s.Binary)
	switch {
	case errors.Is(err, images.ErrFaultHooks):
	case err != nil:
		return images.Written{}, err
	default:
		return images.Written{}, fmt.Errorf("%s: --faults, but built without the fault hooks", s.Binary)
	}
	return checkAndWrite(s, b, dst)
}

// checkAndWrite checks the binary b of s was built as s says, builds its
// image and writes it to dst.
func checkAndWrite(s images.Spec, b images.Binary, dst string) (images.Written, error) {
	switch {
	case b.GOOS != "linux" || b.GOARCH != s.Arch:
		return images.Written{}, fmt.Errorf("%s is built for %s/%s, not linux/%s", s.Binary, b.GOOS, b.GOARCH, s.Arch)
	case b.Revision != s.Revision:
		return images.Written{}, fmt.Errorf("%s has revision %q, not %q (built with -buildvcs=true?)", s.Binary, b.Revision, s.Revision)
	}
	if runtime.GOOS == "linux" && runtime.GOARCH == s.Arch {
		if _, err := images.CheckVersion(s.Binary, s.Program.Name, s.Version); err != nil {
			return images.Written{}, err
		}
	}
	return write(s, dst)
}

// buildForeign builds the image of a foreign program's static binary and
// writes it to dst.
func buildForeign(s images.Spec, dst string) (images.Written, error) {
	if err := images.CheckStatic(s.Binary); err != nil {
		return images.Written{}, err
	}
	return write(s, dst)
}

// write builds the image of s and writes it to dst.
func write(s images.Spec, dst string) (images.Written, error) {
	img, err := images.Build(s)
	if err != nil {
		return images.Written{}, err
	}
	tag, err := s.Tag()
	if err != nil {
		return images.Written{}, err
	}
	return images.WriteTarball(dst, img, tag, s.Created)
}

// createdTime is the images' creation time: flag, else SOURCE_DATE_EPOCH,
// else the time of the commit checked out.
func createdTime(flagValue string) (time.Time, error) {
	if flagValue != "" {
		t, err := time.Parse(time.RFC3339, flagValue)
		if err != nil {
			return time.Time{}, fmt.Errorf("--created: %w", err)
		}
		return t, nil
	}
	if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
		sec, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
		}
		return time.Unix(sec, 0), nil
	}
	out, err := git("log", "-1", "--format=%cI")
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339, out)
	if err != nil {
		return time.Time{}, fmt.Errorf("git log: commit time: %w", err)
	}
	return t, nil
}

// git runs git with args and returns its output, trimmed.
func git(args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
