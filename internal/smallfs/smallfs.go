// Package smallfs mounts small filesystems to fill, for the tests and drills
// of a full disk: a tmpfs of a given size on a directory (Linux, as root),
// the space it has left, and a file that takes all but a given part of it.
package smallfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellkit/cellkit/internal/storage"
)

// Mount mounts a tmpfs of size bytes on dir (which must exist). It needs
// root (CAP_SYS_ADMIN); the error says so otherwise.
func Mount(dir string, size int64) error {
	if os.Geteuid() != 0 {
		return errors.New("smallfs: mounting a filesystem needs root")
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10)+",mode=0755", "tmpfs", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("smallfs: mount a %d-byte tmpfs on %s: %v: %s", size, dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Unmount unmounts dir, lazily: a process that still has files open there
// keeps them until it closes them.
func Unmount(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("smallfs: unmount %s: %w", dir, err)
	}
	return nil
}

// Fill writes the file name in dir until at most leave bytes are free on
// its filesystem (or it is full: ENOSPC ends it without an error), and
// returns how many bytes it wrote. Remove the file to give the space back.
func Fill(dir, name string, leave int64) (int64, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var n int64
	for {
		u, err := storage.Stat(dir)
		if err != nil {
			return n, err
		}
		left := u.Free - leave
		if left <= 0 {
			return n, nil
		}
		w, err := f.Write(chunk[:min(int64(len(chunk)), left)])
		n += int64(w)
		if errors.Is(err, unix.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// Temp mounts a tmpfs of size bytes on a new temporary directory of the
// test and returns the directory, unmounted at cleanup. A test that cannot
// mount (not root) is skipped, saying why.
func Temp(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := Mount(dir, size); err != nil {
		t.Skipf("a full disk needs a small filesystem: %v", err)
	}
	t.Cleanup(func() {
		if err := Unmount(dir); err != nil {
			t.Error(err)
		}
	})
	return dir
}
