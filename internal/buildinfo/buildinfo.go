// Package buildinfo names the build a cellkit program runs: the version
// given at build time and the source revision Go stamps into the binary.
//
// A release build sets the version with
//
//	go build -ldflags "-X github.com/cellkit/cellkit/internal/buildinfo.version=1.4.0"
//
// (`make images` does, from `git describe`). Without it the version is
// "devel". The revision, and whether the tree had uncommitted changes,
// come from the VCS stamp of `go build` (runtime/debug.ReadBuildInfo).
package buildinfo

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/cellkit/cellkit/internal/api"
)

// version is set by the linker; see the package comment.
var version string

// Info is what a binary knows of its own build.
type Info struct {
	Version  string `json:"version"`            // the release's version, or "devel"
	Revision string `json:"revision,omitempty"` // the VCS commit, if stamped
	Modified bool   `json:"modified,omitempty"` // the tree had uncommitted changes
	Go       string `json:"go"`                 // the toolchain, "go1.26.1"
	Platform string `json:"platform"`           // "linux/amd64"
}

// Get returns this binary's build information.
func Get() Info {
	i := Info{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if i.Version == "" {
		i.Version = "devel"
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	return i
}

// Version returns the version alone ("devel" when not set at build time).
func Version() string { return Get().Version }

// String is the line `PROGRAM --version` prints:
// "cell 1.4.0 (revision 0123abcd4567, go1.26.1 linux/amd64)".
func (i Info) String() string {
	rev := ""
	if i.Revision != "" {
		r := i.Revision
		if len(r) > 12 {
			r = r[:12]
		}
		rev = "revision " + r
		if i.Modified {
			rev += " modified"
		}
		rev += ", "
	}
	return fmt.Sprintf("%s (%s%s %s)", i.Version, rev, i.Go, i.Platform)
}

// Release names what this process runs: its version, its executable's
// SHA-256 and the settings given (lines "name=value", in the order to
// hash: callers sort them).
func Release(settings []string) (api.Release, error) {
	bin, err := executableSum()
	if err != nil {
		return api.Release{}, err
	}
	cfg := sha256.New()
	for _, s := range settings {
		cfg.Write([]byte(s))
		cfg.Write([]byte{'\n'})
	}
	config := hex.EncodeToString(cfg.Sum(nil))
	id := sha256.Sum256([]byte(bin + "\n" + config + "\n"))
	v := Version()
	return api.Release{ID: v + "@" + hex.EncodeToString(id[:])[:12], Version: v, Binary: bin[:12], Config: config[:12]}, nil
}

// executableSum is the hex digest of the running executable, read once:
// the SHA-256 of its Go build ID where it has one (the toolchain's hash
// of the binary's content, written into it: a different build, a
// different ID), else of the whole file. The build ID is a few bytes
// read from the ELF note; hashing the whole file costs every start tens
// of milliseconds of CPU (17 MB on a virtual machine), which a router
// taking over a busy host's sockets takes from the requests it serves.
var executableSum = sync.OnceValues(func() (string, error) {
	path, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	if id := goBuildID(path); id != "" {
		sum := sha256.Sum256([]byte("go build id " + id))
		return hex.EncodeToString(sum[:]), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("release: read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
})

// goBuildID is the Go build ID in the ELF note of the executable at path
// (what go tool buildid prints), or "" if it has none.
func goBuildID(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sec := f.Section(".note.go.buildid")
	if sec == nil {
		return ""
	}
	note, err := sec.Data()
	if err != nil || len(note) < 16 {
		return ""
	}
	// An ELF note: name size, description size, type, then the name
	// ("Go\x00\x00") and the description (the ID).
	bo := f.ByteOrder
	namesz, descsz := bo.Uint32(note[0:4]), bo.Uint32(note[4:8])
	start := 12 + (namesz+3)&^3
	if uint64(start)+uint64(descsz) > uint64(len(note)) || string(note[12:12+min(namesz, 2)]) != "Go" {
		return ""
	}
	return string(note[start : start+descsz])
}
