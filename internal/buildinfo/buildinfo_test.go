package buildinfo

import (
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
