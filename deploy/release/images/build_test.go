package images

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuildIsReproducible builds an image twice from the same inputs and
// gets the same digest and the same tarball, byte for byte; each input
// changed gives another digest.
func TestBuildIsReproducible(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "cell")
	if err := os.WriteFile(bin, []byte("not a real program, only bytes to package"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := Spec{
		Program:  Programs[1],
		Binary:   bin,
		Version:  "1.4.0",
		Revision: "0123456789abcdef0123456789abcdef01234567",
		Source:   "https://github.com/cellkit/cellkit",
		Created:  time.Date(2026, 11, 30, 9, 15, 0, 0, time.FixedZone("CET", 3600)),
		Arch:     "amd64",
		Repo:     "cellkit",
	}

	write := func(s Spec, dst string) (Written, []byte) {
		t.Helper()
		img, err := Build(s)
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		tag, err := s.Tag()
		if err != nil {
			t.Fatal(err)
		}
		w, err := WriteTarball(dst, img, tag, s.Created)
		if err != nil {
			t.Fatalf("WriteTarball: %v", err)
		}
		b, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if w.Size != int64(len(b)) {
			t.Fatalf("Written.Size = %d, the file has %d bytes", w.Size, len(b))
		}
		return w, b
	}

	first, firstTar := write(base, filepath.Join(dir, "first.tar"))
	second, secondTar := write(base, filepath.Join(dir, "second.tar"))
	if first.Digest != second.Digest {
		t.Fatalf("same inputs, digests differ: %s, then %s", first.Digest, second.Digest)
	}
	if !bytes.Equal(firstTar, secondTar) {
		t.Fatalf("same inputs, tarballs differ (%d and %d bytes)", len(firstTar), len(secondTar))
	}
	if got, want := first.Tag, "cellkit/cell:1.4.0"; got != want {
		t.Fatalf("tag: got %q, want %q", got, want)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Fatalf("left in the output directory: %v, want the binary and the two tarballs", entries)
	}

	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("another program"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Spec)
	}{
		{"created", func(s *Spec) { s.Created = s.Created.Add(time.Second) }},
		{"version", func(s *Spec) { s.Version = "1.4.1" }},
		{"revision", func(s *Spec) { s.Revision = "89abcdef0123456789abcdef0123456789abcdef" }},
		{"binary", func(s *Spec) { s.Binary = other }},
		{"arch", func(s *Spec) { s.Arch = "arm64" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.change(&s)
			img, err := Build(s)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			d, err := img.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if d == first.Digest {
				t.Fatalf("%s changed, digest unchanged: %s", tc.name, d)
			}
		})
	}
}

func TestSpecRefusesIncompleteOrBadNames(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "router")
	if err := os.WriteFile(bin, []byte("only bytes"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := Spec{Program: Programs[0], Binary: bin, Version: "1.0.0", Revision: "abc", Created: time.Unix(1, 0), Arch: "amd64", Repo: "cellkit"}
	if _, err := Build(base); err != nil {
		t.Fatalf("Build(%+v): %v", base, err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Spec)
	}{
		{"no version", func(s *Spec) { s.Version = "" }},
		{"a version no tag may be", func(s *Spec) { s.Version = "1.0.0+build" }},
		{"no revision", func(s *Spec) { s.Revision = "" }},
		{"no creation time", func(s *Spec) { s.Created = time.Time{} }},
		{"no architecture", func(s *Spec) { s.Arch = "" }},
		{"a repository no name may be in", func(s *Spec) { s.Repo = "Cellkit Images" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.change(&s)
			if _, err := Build(s); err == nil {
				t.Fatalf("Build(%+v): no error", s)
			}
		})
	}
}

// TestReadBinaryRefusesFaultHooks: a binary built with the tag "faults"
// (the drills' cell) is refused (ErrFaultHooks): it goes into no image
// but a drill's, which images --faults makes.
func TestReadBinaryRefusesFaultHooks(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":  "module example.com/faulty\n\ngo 1.26\n",
		"main.go": "package main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		tags    string
		refused bool
	}{{"faults", true}, {"netgo,faults", true}, {"netgo", false}} {
		bin := filepath.Join(dir, "bin-"+strings.ReplaceAll(tc.tags, ",", "-"))
		// Built: the build's tags are what ReadBinary reads.
		cmd := exec.Command("go", "build", "-tags", tc.tags, "-o", bin, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build -tags %s: %v\n%s", tc.tags, err, out)
		}
		b, err := ReadBinary(bin)
		if refused := errors.Is(err, ErrFaultHooks); refused != tc.refused || b.Faults() != tc.refused {
			t.Errorf("-tags %s: ReadBinary = %+v, %v; want refused %v", tc.tags, b, err, tc.refused)
		}
	}
}
