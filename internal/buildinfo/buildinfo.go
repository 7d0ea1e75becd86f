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
	"fmt"
	"runtime"
	"runtime/debug"
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
