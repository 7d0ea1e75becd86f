package reload

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAChangeIsLoadedOnceItSettles: a look that finds the files changed
// only notes it; the next look loads them if they are still as noted. A
// writer caught half-way (here "tw" of "two", which the load would take)
// is never loaded, whatever the looks see between its writes.
func TestAChangeIsLoadedOnceItSettles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("one")
	var loaded []string
	w := New([]string{path}, func() error {
		b, err := os.ReadFile(path)
		loaded = append(loaded, string(b))
		return err
	}, Config{What: "test"}, Options{})

	look := func(want ...string) {
		t.Helper()
		if err := w.reload(false); err != nil {
			t.Fatal(err)
		}
		if len(loaded) != len(want) {
			t.Fatalf("loaded %q, want %q", loaded, want)
		}
	}
	look()
	write("tw")
	look() // the change is noted, not loaded
	write("two")
	look() // changed again since the note
	look("two")
	look("two") // nothing new
	write("three")
	look("two")
	if err := w.Reload(); err != nil { // forced: at once
		t.Fatal(err)
	}
	look("two", "three")
}
