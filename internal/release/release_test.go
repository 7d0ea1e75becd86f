package release

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/control"
)

// TestValidate: a release names a binary that says it is the program, or
// an image reference, never both, and flags as name=value; one that
// changes nothing is refused.
func TestValidate(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cell := script("cell", "echo 'cell v2 (go)'", 0o755)
	router := script("router", "echo 'router v2 (go)'", 0o755)
	mute := script("mute", "true", 0o755)
	failing := script("failing", "exit 3", 0o755)
	plain := script("plain", "echo 'cell v2'", 0o644)
	const image = "registry.example.com/cellkit/cell:1.5.0"
	for _, tc := range []struct {
		spec Spec
		want string // "" valid
	}{
		{Spec{Bin: cell}, ""},
		{Spec{Bin: cell, Set: []string{"workers=8", "agency=nice=x:1"}}, ""},
		{Spec{Set: []string{"workers=8"}}, ""},
		{Spec{Image: image}, ""},
		{Spec{Image: image, Set: []string{"workers=8"}}, ""},
		{Spec{}, "needs a binary, an image or a flag"},
		{Spec{Bin: cell, Image: image}, "a binary or an image, not both"},
		{Spec{Bin: filepath.Join(dir, "missing")}, "binary: "},
		{Spec{Bin: dir}, "is not an executable file"},
		{Spec{Bin: plain}, "is not an executable file"},
		{Spec{Bin: router}, "is router, not cell"},
		{Spec{Bin: mute}, "does not report its version"},
		{Spec{Bin: failing}, "does not report its version"},
		{Spec{Image: "Cellkit/Cell:1"}, "not an image reference"},
		{Spec{Image: "cellkit/cell:1 --privileged"}, "not an image reference"},
		{Spec{Set: []string{"workers"}}, `flag "workers": want name=value`},
		{Spec{Set: []string{"=3"}}, "want name=value"},
		{Spec{Set: []string{"--workers=3"}}, "want name=value"},
	} {
		err := tc.spec.Validate("cell")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.spec, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error about %q", tc.spec, err, tc.want)
		}
	}
}

// TestValidImage holds the image grammar to references registries take
// and refuses those they do not.
func TestValidImage(t *testing.T) {
	for _, ref := range []string{
		"cell", "cellkit/cell", "cellkit/cell:1.5.0", "registry.example.com/cellkit/cell:1.5.0",
		"localhost:5000/cellkit/cell:v1", "registry.example.com:443/a/b/c:latest", "[::1]:5000/cell:1",
		"REGISTRY.Example.com/cell:1", "cellkit/cell_x.y-z__w:1_A.b-C",
		"cellkit/cell@sha256:" + strings.Repeat("ab", 32), "cellkit/cell:1.5.0@sha256:" + strings.Repeat("0", 64),
		"cell:" + strings.Repeat("t", 128),
	} {
		if err := ValidImage(ref); err != nil {
			t.Errorf("%q: %v, want valid", ref, err)
		}
	}
	for _, ref := range []string{
		"", "cellkit/Cell:1", "cellkit/cell:", ":1", "cellkit//cell", "/cell", "cell/", "cellkit/-cell",
		"cellkit/cell:-1", "cellkit/cell:" + strings.Repeat("t", 129), "cellkit/cell@sha256:abc",
		"cellkit/cell@:" + strings.Repeat("a", 64), "cellkit/cell@sha256", "cell:1@", "cell 1", "cell:1\n",
		"-registry.example.com/cell:1", "registry.example.com:port/cell:1", "cell$:1",
		strings.Repeat("a", 256), "https://registry.example.com/cell:1",
	} {
		if err := ValidImage(ref); err == nil {
			t.Errorf("%q: valid, want refused", ref)
		}
	}
}

// TestApply: the release's binary or image in place of the command's
// (never both in what it makes); a binary's flags after the command's
// arguments, an image's settings in place of them; the command given left
// as it was, and no release claimed.
func TestApply(t *testing.T) {
	proc := control.Command{Release: "cell@1", Bin: "/old/cell", Args: []string{"--cell", "c1"}}
	got := Spec{Bin: "/new/cell", Set: []string{"workers=8"}}.Apply(proc)
	if want := (control.Command{Bin: "/new/cell", Args: []string{"--cell", "c1", "--workers=8"}}); !got.Same(want) || got.Release != "" || got.Image != "" {
		t.Errorf("a binary: %+v", got)
	}
	if !slices.Equal(proc.Args, []string{"--cell", "c1"}) {
		t.Errorf("Apply changed the command it was given: %v", proc.Args)
	}
	got.Args[0] = "changed"
	if proc.Args[0] != "--cell" {
		t.Error("Apply's command shares its arguments with the one it was given")
	}
	if got := (Spec{Set: []string{"workers=8"}}).Apply(proc); got.Bin != "/old/cell" || got.Image != "" || !slices.Equal(got.Args, []string{"--cell", "c1", "--workers=8"}) {
		t.Errorf("flags alone: %+v", got)
	}
	// An image's release is its settings exactly: the pod's own
	// arguments are the platform's, and a setting left out is gone.
	pod := control.Command{Image: "cellkit/cell:1.4.0", Args: []string{"--workers=4", "--agency-timeout=2s"}}
	if got := (Spec{Image: "cellkit/cell:1.5.0", Set: []string{"workers=8"}}).Apply(pod); got.Image != "cellkit/cell:1.5.0" || got.Bin != "" || !slices.Equal(got.Args, []string{"--workers=8"}) {
		t.Errorf("an image: %+v, want its settings alone", got)
	}
	if got := (Spec{Image: "cellkit/cell:1.5.0"}).Apply(pod); len(got.Args) != 0 {
		t.Errorf("an image without settings: %+v, want none", got)
	}
	if got := Settings([]string{"--workers=8", "--cell", "c1", "-x=1", "--a=b=c"}); !slices.Equal(got, []string{"workers=8", "a=b=c"}) {
		t.Errorf("Settings: %q", got)
	}
	if got := (Spec{Image: "cellkit/cell:1.5.0"}).Apply(proc); got.Image != "cellkit/cell:1.5.0" || got.Bin != "" {
		t.Errorf("an image in place of a binary: %+v, want the image alone", got)
	}
	if got := (Spec{Bin: "/new/cell"}).Apply(pod); got.Bin != "/new/cell" || got.Image != "" {
		t.Errorf("a binary in place of an image: %+v, want the binary alone", got)
	}
	if got := (Spec{}).Apply(proc); !got.Same(proc) || got.Release != "" {
		t.Errorf("an empty release: %+v, want the command as it was", got)
	}
}
