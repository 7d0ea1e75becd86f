package inflight

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

func TestCleanStopLeavesNoCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store", "inflight.log")
	j, crashed, err := Open(path)
	if err != nil || crashed != nil {
		t.Fatalf("first Open: %q, %v", crashed, err)
	}
	j.Begin("a")
	j.Begin("b")
	j.End("a")
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, crashed, err = Open(path); err != nil || crashed != nil {
		t.Fatalf("Open after a clean stop: %q, %v, want nothing", crashed, err)
	}
}

// TestCrashedProcess: a process that dies without Close leaves what it had
// in flight, unsynced, for the next Open (a real process, killed).
func TestCrashedProcess(t *testing.T) {
	if os.Getenv("INFLIGHT_CHILD") != "" {
		j, _, err := Open(os.Getenv("INFLIGHT_CHILD"))
		if err != nil {
			os.Exit(3)
		}
		for i := range 1000 {
			j.Begin(strconv.Itoa(i))
			if i%10 != 7 {
				j.End(strconv.Itoa(i))
			}
		}
		j.Begin("twice")
		j.Begin("twice")
		j.End("twice")
		os.Exit(2) // no Close: a crash
	}
	path := filepath.Join(t.TempDir(), "inflight.log")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCrashedProcess$")
	cmd.Env = append(os.Environ(), "INFLIGHT_CHILD="+path)
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Fatalf("child: %v", err)
	}
	j, crashed, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 7; i < 1000; i += 10 {
		want = append(want, strconv.Itoa(i))
	}
	want = append(want, "twice")
	slices.Sort(want)
	if !slices.Equal(crashed, want) {
		t.Fatalf("crashed %d IDs %q..., want %d", len(crashed), crashed[:min(3, len(crashed))], len(want))
	}

	// Until each is forgotten, a crash before then finds it again, with
	// what the new run had in flight.
	for _, id := range crashed[1:] {
		j.Forget(id)
	}
	j.Begin("new")
	j.Begin("done")
	j.End("done")
	if err := j.Err(); err != nil {
		t.Fatal(err)
	}
	_, again, err := Open(path) // the second run "crashed": no Close
	if err != nil {
		t.Fatal(err)
	}
	if w := []string{crashed[0], "new"}; !slices.Equal(again, w) {
		t.Errorf("after a crash before the list was dealt with: %q, want %q", again, w)
	}
}

func TestCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inflight.log")
	j, _, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	j.Begin("long-running")
	id := string(make([]byte, 100))
	for i := range 2 * compactAt / 100 {
		id := strconv.Itoa(i) + id[:90]
		j.Begin(id)
		j.End(id)
	}
	info, err := os.Stat(path)
	if err != nil || info.Size() > compactAt+200 {
		t.Fatalf("journal of %d bytes after %d inquiries: not compacted (%v)", info.Size(), 2*compactAt/100, err)
	}
	_, crashed, err := Open(path)
	if err != nil || !slices.Equal(crashed, []string{"long-running"}) {
		t.Errorf("after compaction: %q, %v", crashed, err)
	}
}

func TestBadIDsAreNotWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inflight.log")
	j, _, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	j.Begin("a\n+b")
	_, crashed, err := Open(path)
	if err != nil || crashed != nil {
		t.Errorf("an ID with a newline: %q, %v", crashed, err)
	}
}
