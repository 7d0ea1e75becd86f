package atomicfile

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

func TestWriteFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		old  []byte // nil: no file before
		data []byte
		perm os.FileMode
	}{
		{"new file", nil, []byte("hello\n"), 0o600},
		{"replace", []byte("old content, longer than the new one"), []byte("new"), 0o644},
		{"empty", []byte("old"), []byte{}, 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f.json")
			if tc.old != nil {
				if err := os.WriteFile(path, tc.old, 0o666); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteFile(path, tc.data, tc.perm); err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, tc.data) {
				t.Fatalf("content = %q, %v; want %q", got, err, tc.data)
			}
			info, err := os.Stat(path)
			if err != nil || info.Mode().Perm() != tc.perm {
				t.Fatalf("mode = %v, %v; want %v", info.Mode().Perm(), err, tc.perm)
			}
			assertOnly(t, dir, "f.json")
		})
	}
}

func TestWriteFileFailureLeavesTargetAlone(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
		t.Fatal("WriteFile into a missing directory succeeded")
	}
	// The target is a directory: the rename fails, the temp file goes.
	target := filepath.Join(dir, "d")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(target, []byte("x"), 0o600); err == nil {
		t.Fatal("WriteFile over a non-empty directory succeeded")
	}
	assertOnly(t, dir, "d")
}

// Readers racing with writers see one whole version or another.
func TestWriteFileReadersSeeWholeVersions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	versions := [][]byte{bytes.Repeat([]byte("a"), 64<<10), bytes.Repeat([]byte("b"), 3)}
	if err := WriteFile(path, versions[0], 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := WriteFile(path, versions[i%2], 0o600); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 200 {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, versions[0]) && !bytes.Equal(got, versions[1]) {
			t.Fatalf("read %d bytes that are neither version", len(got))
		}
	}
	close(stop)
	wg.Wait()
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, names) {
		t.Fatalf("directory holds %v, want %v (a temporary file left behind?)", got, names)
	}
}
