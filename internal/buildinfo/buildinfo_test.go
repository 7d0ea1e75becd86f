package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	i := Info{Version: "1.4.0", Revision: "0123456789abcdef", Modified: true, Go: "go1.26.1", Platform: "linux/amd64"}
	if got, want := i.String(), "1.4.0 (revision 0123456789ab modified, go1.26.1 linux/amd64)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	i = Info{Version: "devel", Go: "go1.26.1", Platform: "linux/arm64"}
	if got, want := i.String(), "devel (go1.26.1 linux/arm64)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestGet(t *testing.T) {
	i := Get()
	if i.Version != "devel" {
		t.Errorf("Version = %q without a linker flag, want devel", i.Version)
	}
	if i.Go != runtime.Version() || !strings.Contains(i.Platform, "/") {
		t.Errorf("Get() = %+v", i)
	}
}

// TestBuildIDIsTheToolchains: the build ID the release digest is taken
// from is the one `go tool buildid` reads from this test's binary, and a
// file without one has none (its whole content is hashed instead).
func TestBuildIDIsTheToolchains(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	if err != nil {
		t.Fatalf("go tool buildid: %v", err)
	}
	want := strings.TrimSpace(string(out))
	if got := goBuildID(exe); got != want || got == "" {
		t.Fatalf("goBuildID = %q, go tool buildid says %q", got, want)
	}
	other := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(other, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := goBuildID(other); got != "" {
		t.Fatalf("a shell script has build ID %q", got)
	}
	if sum, err := executableSum(); err != nil || len(sum) != 64 {
		t.Fatalf("executableSum = %q, %v", sum, err)
	}
}
