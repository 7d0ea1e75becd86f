package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// File is the registry for one machine: the map is one JSON file, replaced
// atomically (temp file, fsync, rename, fsync of the directory), so a reader
// sees the old map or the new one, never half of one. Writers serialise on
// an flock of PATH.lock; the writer lock is an flock of PATH.writer, which
// the kernel releases when the holding process dies.
type File struct {
	path string
	cfg  FileConfig
	opts Options
}

var _ Registry = (*File)(nil)

// FileConfig locates and tunes a file registry. Zero values mean the
// defaults in brackets.
type FileConfig struct {
	// Path is the map's file. Required.
	Path string
	// PollInterval is how often Watch checks the file for a new map [100ms].
	PollInterval time.Duration
}

// DefaultFileConfig returns the defaults in brackets above.
func DefaultFileConfig() FileConfig {
	return FileConfig{PollInterval: 100 * time.Millisecond}
}

// withDefaults fills the zero fields of c from DefaultFileConfig, field
// by field.
func (c FileConfig) withDefaults() FileConfig {
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultFileConfig().PollInterval
	}
	return c
}

// NewFile returns the registry stored at cfg.Path. The directory is created
// if needed; the file itself appears with the first CompareAndSwap.
func NewFile(cfg FileConfig, opts Options) (*File, error) {
	if cfg.Path == "" {
		return nil, errors.New("file registry: no path")
	}
	abs, err := filepath.Abs(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("file registry %q: %w", cfg.Path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, fmt.Errorf("file registry: %w", err)
	}
	cfg = cfg.withDefaults()
	cfg.Path = abs
	return &File{path: abs, cfg: cfg, opts: opts}, nil
}

// Describe names the registry.
func (f *File) Describe() string { return "file:" + f.path }

// Close does nothing: the file registry holds no open files between calls.
func (f *File) Close() error { return nil }

// Load reads and validates the map file.
func (f *File) Load(ctx context.Context) (*slotmap.Map, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m, _, err := f.read()
	return m, err
}

// read returns the map and the identity of the file it came from.
func (f *File) read() (*slotmap.Map, fileSig, error) {
	file, err := os.Open(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(filepath.Dir(f.path)); derr != nil {
			return nil, fileSig{}, fmt.Errorf("file registry %s: %w", f.path, derr)
		}
		return nil, fileSig{}, ErrNoMap
	}
	if err != nil {
		return nil, fileSig{}, fmt.Errorf("file registry: %w", err)
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return nil, fileSig{}, fmt.Errorf("file registry: %w", err)
	}
	sig := sigOf(info)
	data := make([]byte, info.Size())
	if _, err := file.ReadAt(data, 0); err != nil && info.Size() > 0 {
		return nil, sig, fmt.Errorf("file registry: read %s: %w", f.path, err)
	}
	m, err := slotmap.Decode(data)
	if err != nil {
		return nil, sig, fmt.Errorf("file registry: %s holds no valid map: %w", f.path, err)
	}
	return m, sig, nil
}

// fileSig identifies one version of the file: an atomic replace always
// gives a new inode.
type fileSig struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func sigOf(info fs.FileInfo) fileSig {
	s := fileSig{size: info.Size(), mtime: info.ModTime()}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s
}

// CompareAndSwap writes m if the file still holds version old.
func (f *File) CompareAndSwap(ctx context.Context, old int64, m *slotmap.Map) error {
	if err := checkNext(old, m); err != nil {
		return err
	}
	data, err := m.Encode()
	if err != nil {
		return err
	}
	unlock, err := flock(ctx, f.path+".lock", 5*time.Millisecond)
	if err != nil {
		return fmt.Errorf("file registry: %w", err)
	}
	defer unlock()
	cur, _, err := f.read()
	switch {
	case errors.Is(err, ErrNoMap):
		if old != 0 {
			return fmt.Errorf("%w: registry holds no map, expected version %d", ErrConflict, old)
		}
	case err != nil:
		// A corrupt file is not overwritten blindly: someone must look at it.
		return fmt.Errorf("refusing to replace the current map: %w", err)
	case cur.Version() != old:
		return fmt.Errorf("%w: registry holds version %d, expected %d", ErrConflict, cur.Version(), old)
	}
	if err := atomicfile.WriteFile(f.path, data, 0o600); err != nil {
		return fmt.Errorf("file registry: %w", err)
	}
	return nil
}

// Watch polls the file's identity every PollInterval and
// reads it only when it changed.
func (f *File) Watch(ctx context.Context, after int64, fn func(Event)) {
	last := after
	var seen fileSig
	var seenErr error
	tick := time.NewTicker(f.cfg.PollInterval)
	defer tick.Stop()
	for {
		ev := f.poll(&seen, &seenErr, &last)
		fn(ev)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// poll is one round of Watch: it re-reads the file only when its identity
// changed, and repeats the last error while the same broken file stays.
func (f *File) poll(seen *fileSig, seenErr *error, last *int64) Event {
	info, err := os.Stat(f.path)
	if err != nil {
		*seen, *seenErr = fileSig{}, nil
		if errors.Is(err, fs.ErrNotExist) {
			if _, derr := os.Stat(filepath.Dir(f.path)); derr == nil {
				err = ErrNoMap
			}
		}
		return Event{Err: err, At: f.opts.now()}
	}
	if sigOf(info) == *seen {
		return Event{Err: *seenErr, At: f.opts.now()}
	}
	m, sig, err := f.read()
	*seen, *seenErr = sig, err
	if err != nil {
		return Event{Err: err, At: f.opts.now()}
	}
	if m.Version() <= *last {
		return Event{At: f.opts.now(), Current: m.Version()}
	}
	*last = m.Version()
	return Event{Map: m, At: f.opts.now(), Current: m.Version()}
}

// Lock takes the writer lock: an flock on PATH.writer, with the holder
// description written into the file for others to read.
func (f *File) Lock(ctx context.Context, holder string) (Lock, error) {
	path := f.path + ".writer"
	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("file registry lock: %w", err)
	}
	if err := flockWait(ctx, file, 50*time.Millisecond); err != nil {
		file.Close()
		if ctx.Err() != nil {
			return nil, &LockedError{Holder: readHolder(path), Err: ctx.Err()}
		}
		return nil, fmt.Errorf("file registry lock: %w", err)
	}
	// The description is for others' error messages; a disk that cannot
	// take it cannot take the map either, so failing here is failing early.
	data, _ := json.Marshal(newHolder(holder, f.opts.now()))
	err = file.Truncate(0)
	if err == nil {
		_, err = file.WriteAt(data, 0)
	}
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("file registry lock: write holder: %w", err)
	}
	return &fileLock{file: file, lost: make(chan struct{})}, nil
}

func readHolder(path string) Holder {
	var h Holder
	data, err := os.ReadFile(path)
	if err == nil {
		_ = json.Unmarshal(data, &h)
	}
	return h
}

type fileLock struct {
	file *os.File
	lost chan struct{} // never closed: an flock cannot be lost by a live process
}

func (l *fileLock) Lost() <-chan struct{} { return l.lost }

func (l *fileLock) Unlock(context.Context) error {
	if l.file == nil {
		return nil
	}
	_ = l.file.Truncate(0)
	err := l.file.Close() // closing the last descriptor releases the flock
	l.file = nil
	return err
}

// flock takes an exclusive flock on path, polling every interval until ctx
// is done; unlock releases it.
func flock(ctx context.Context, path string, interval time.Duration) (unlock func(), err error) {
	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flockWait(ctx, file, interval); err != nil {
		file.Close()
		return nil, err
	}
	return func() { file.Close() }, nil
}

// flockWait takes an exclusive flock on file, retrying every interval until
// ctx is done (a blocking flock could not be cancelled).
func flockWait(ctx context.Context, file *os.File, interval time.Duration) error {
	for {
		err := syscall.Flock(int(file.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
