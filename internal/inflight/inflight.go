// Package inflight keeps a journal of the inquiries a process is working
// on, so that the next start of the process knows which were in flight when
// it crashed.
//
// The journal is a file of lines "+ID" (work began) and "-ID" (it ended),
// appended with one write each and never synced: a process that dies (a
// panic outside any inquiry, an OOM kill, SIGKILL) leaves its writes in the
// kernel's page cache, which outlives it. (A host that loses power loses
// them: then nothing is known of that crash.) A clean stop removes the
// file; a file found at start therefore means the last run crashed, and
// its IDs begun and not ended are what that run had in flight.
package inflight

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cellkit/cellkit/internal/atomicfile"
)

// compactAt is the journal's size beyond which it is rewritten with only
// the work in flight.
const compactAt = 4 << 20

// Journal records the work in flight of one process. Its methods are safe
// for concurrent use.
type Journal struct {
	path string

	mu      sync.Mutex
	f       *os.File
	size    int64
	current map[string]int // ID → work in flight under it (an ID may run twice)
	crashed []string       // the last crash's IDs not yet dealt with (Forget)
	err     error          // the first write error: the journal then stops writing
}

// Open opens the journal at path, creating its directory. It returns the
// IDs the last run had in flight when it crashed (sorted; nil after a clean
// stop or at the first start), and a fresh journal for this run.
func Open(path string) (*Journal, []string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, nil, err
	}
	crashed, err := read(path)
	if err != nil {
		return nil, nil, err
	}
	// The crash's list is kept in the new file until the caller has dealt
	// with each ID (Forget): a crash before then finds them again.
	j := &Journal{path: path, current: map[string]int{}, crashed: slices.Clone(crashed)}
	if err := j.rewrite(); err != nil {
		return nil, nil, err
	}
	return j, crashed, nil
}

// read returns the IDs begun and not ended in the journal at path.
func read(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	open := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue // a line cut short by the crash
		}
		switch id := line[1:]; line[0] {
		case '+':
			open[id]++
		case '-':
			if open[id]--; open[id] <= 0 {
				delete(open, id)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("inflight journal %s: %w", path, err)
	}
	var ids []string
	for id := range open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// rewrite replaces the file with "+ID" lines for the last crash's IDs and
// the work in flight, and reopens it for appending. Called with mu held (or
// before the journal is shared).
func (j *Journal) rewrite() error {
	var b strings.Builder
	for _, id := range j.crashed {
		b.WriteString("+" + id + "\n")
	}
	for id, n := range j.current {
		for range n {
			b.WriteString("+" + id + "\n")
		}
	}
	if err := atomicfile.WriteFile(j.path, []byte(b.String()), 0o600); err != nil {
		return err
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if j.f != nil {
		j.f.Close()
	}
	j.f, j.size = f, int64(b.Len())
	return nil
}

// Forget drops id from the last crash's list: the caller has dealt with
// it. Its "+ID" line, written at Open, is cancelled by a "-ID" line.
func (j *Journal) Forget(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	i := slices.Index(j.crashed, id)
	if i < 0 {
		return
	}
	j.crashed = slices.Delete(j.crashed, i, i+1)
	j.appendLocked('-', id)
}

// Begin records that work on id began.
func (j *Journal) Begin(id string) { j.write('+', id) }

// End records that work on id ended, however it ended.
func (j *Journal) End(id string) { j.write('-', id) }

func (j *Journal) write(op byte, id string) {
	if strings.ContainsAny(id, "\n") {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if op == '+' {
		j.current[id]++
	} else if j.current[id]--; j.current[id] <= 0 {
		delete(j.current, id)
	}
	j.appendLocked(op, id)
}

// appendLocked writes one line, and compacts the file past compactAt; mu
// is held.
func (j *Journal) appendLocked(op byte, id string) {
	if j.err != nil || j.f == nil {
		return
	}
	n, err := j.f.Write([]byte(string(op) + id + "\n"))
	j.size += int64(n)
	if err != nil {
		j.err = err
		return
	}
	if j.size > compactAt {
		j.err = j.rewrite()
	}
}

// Err is the first error the journal met writing; it stops writing then
// (the work goes on, unjournaled).
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Close ends a clean run: the journal is removed, so that the next start
// finds no crash.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	j.f.Close()
	j.f = nil
	if err := os.Remove(j.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
