// Package registry stores the versioned cell map where every process can read
// it and one writer at a time can change it.
//
// Two backends implement Registry: a JSON file on local disk (the embedded
// default for one machine) and Consul's KV store. Both guarantee the same
// contract, proven by one shared test suite:
//
//   - Load returns the newest committed map.
//   - CompareAndSwap commits a map only if the stored version is still the one
//     the caller planned against; exactly one of several racing writers wins
//     and the others get ErrConflict. Invalid maps are refused, so a registry
//     never holds a map that slotmap.Decode would reject.
//   - Watch delivers every newer version it sees, in increasing order; bursts
//     may be coalesced to the newest, a version never goes backwards.
//   - Lock gives one writer (a mutating cellctl or the Terraform provider)
//     exclusive use; the lock is released when its holder dies.
//
// Readers on the request path do not use a Registry directly: they use a
// Follower, which keeps the last good map when the registry is unreachable.
package registry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/slotmap"
)

// EnvRegistry names the environment variable that holds the registry URL when
// no flag gives one.
const EnvRegistry = "CELLKIT_REGISTRY"

var (
	// ErrConflict means the stored map is no longer the version the caller
	// planned against: re-read, re-plan, try again.
	ErrConflict = errors.New("map version conflict")
	// ErrNoMap means the registry is reachable but holds no map yet.
	ErrNoMap = errors.New("registry holds no map")
	// ErrLockLost is returned by a Lock's Err after the lock was lost.
	ErrLockLost = errors.New("writer lock lost")
)

// Registry is where the cell map lives.
type Registry interface {
	// Load returns the newest committed map, or ErrNoMap.
	Load(ctx context.Context) (*slotmap.Map, error)
	// CompareAndSwap stores m if the committed version is still old (0: no
	// map yet). m.Version() must be above old: old+1 for a planned change, or
	// more when a map is restored into a registry that lost its data (so that
	// followers, which never go backwards, take it). A lost race is
	// ErrConflict; an invalid map is refused and nothing is written.
	CompareAndSwap(ctx context.Context, old int64, m *slotmap.Map) error
	// Watch blocks until ctx is done, calling fn from one goroutine with an
	// Event for every newer map (versions strictly above after, increasing)
	// and after every round trip to the registry, successful or not.
	Watch(ctx context.Context, after int64, fn func(Event))
	// Lock takes the writer lock, waiting until it is free or ctx is done.
	// holder describes the caller ("cellctl drain c2 by alice@host"). When
	// ctx ends first the error is a *LockedError naming the current holder.
	Lock(ctx context.Context, holder string) (Lock, error)
	// Describe names the registry for messages ("file:/var/map.json").
	Describe() string
	// Close releases connections and files held by the registry.
	Close() error
}

// Event is one observation of a Watch.
type Event struct {
	// Map is a version newer than any delivered before, or nil.
	Map *slotmap.Map
	// Err is non-nil when the registry could not be read in this round; Map
	// is nil then. A nil Err means the registry answered (the caller's view is
	// in sync as of At).
	Err error
	// At is when the round trip finished.
	At time.Time
	// Current is the version of the map the registry held in this round,
	// when it was read (0: not read, or no map). It may be older than the
	// caller's after: a registry rebuilt or restored.
	Current int64
}

// Lock is a held writer lock.
type Lock interface {
	// Lost is closed when the lock is lost (the registry session expired or
	// was destroyed). A writer must stop writing when it is closed.
	Lost() <-chan struct{}
	// Unlock releases the lock. It is safe to call more than once.
	Unlock(ctx context.Context) error
}

// Holder describes who holds a writer lock.
type Holder struct {
	Holder string    `json:"holder"`
	Host   string    `json:"host,omitempty"`
	PID    int       `json:"pid,omitempty"`
	Since  time.Time `json:"since"`
}

func (h Holder) String() string {
	s := h.Holder
	if h.Host != "" || h.PID != 0 {
		s += fmt.Sprintf(" (pid %d on %s)", h.PID, h.Host)
	}
	if !h.Since.IsZero() {
		s += " since " + h.Since.UTC().Format(time.RFC3339)
	}
	return s
}

// LockedError is returned by Lock when another writer held the lock until the
// caller gave up.
type LockedError struct {
	Holder Holder
	Err    error // the context error
}

func (e *LockedError) Error() string {
	if e.Holder.Holder == "" {
		return fmt.Sprintf("writer lock is held by another writer: %v", e.Err)
	}
	return fmt.Sprintf("writer lock is held by %s: %v", e.Holder, e.Err)
}

func (e *LockedError) Unwrap() error { return e.Err }

func newHolder(desc string, now time.Time) Holder {
	host, _ := os.Hostname()
	return Holder{Holder: desc, Host: host, PID: os.Getpid(), Since: now.UTC()}
}

// Config names a registry for Open and tunes its backend. Zero values mean
// the defaults in brackets.
type Config struct {
	// URL is the registry:
	//
	//	file:PATH                     a JSON file on local disk (file:///abs/path too)
	//	consul://HOST:PORT/PREFIX     Consul KV under PREFIX (key PREFIX/map);
	//	                              the ACL token comes from CONSUL_HTTP_TOKEN
	//
	// [the value of CELLKIT_REGISTRY].
	URL string
	// PollInterval, WatchWait, MaxBackoff and LockTTL tune the backend the
	// URL names (see FileConfig and ConsulConfig for their defaults).
	PollInterval time.Duration
	WatchWait    time.Duration
	MaxBackoff   time.Duration
	LockTTL      time.Duration
	// Token is a Consul registry's ACL token [$CONSUL_HTTP_TOKEN].
	Token string
}

// Options carry a registry backend's collaborators. The zero value is
// usable.
type Options struct {
	// Now is the clock of Event.At and of lock holders. Nil means time.Now.
	Now func() time.Time
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Open opens the registry cfg.URL names.
func Open(cfg Config, opts Options) (Registry, error) {
	rawURL := cfg.URL
	if rawURL == "" {
		rawURL = os.Getenv(EnvRegistry)
	}
	if rawURL == "" {
		return nil, fmt.Errorf("no registry: pass --registry or set %s (file:PATH or consul://HOST:PORT/PREFIX)", EnvRegistry)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("registry url %q: %w", rawURL, err)
	}
	switch u.Scheme {
	case "file":
		path := u.Opaque
		if path == "" {
			path = u.Path
		}
		if path == "" {
			return nil, fmt.Errorf("registry url %q: no path (want file:PATH)", rawURL)
		}
		return NewFile(FileConfig{Path: path, PollInterval: cfg.PollInterval}, opts)
	case "consul":
		if u.Host == "" {
			return nil, fmt.Errorf("registry url %q: no host (want consul://HOST:PORT/PREFIX)", rawURL)
		}
		return NewConsul(ConsulConfig{
			Addr: u.Host, Prefix: strings.Trim(u.Path, "/"),
			PollInterval: cfg.PollInterval, WatchWait: cfg.WatchWait, MaxBackoff: cfg.MaxBackoff, LockTTL: cfg.LockTTL,
			Token: cfg.Token,
		}, opts)
	default:
		return nil, fmt.Errorf("registry url %q: unknown scheme %q (want file: or consul://)", rawURL, u.Scheme)
	}
}

// checkNext refuses a map that cannot follow version old.
func checkNext(old int64, m *slotmap.Map) error {
	if m == nil {
		return errors.New("nil map")
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("refusing invalid map: %w", err)
	}
	if m.Version() <= old {
		return fmt.Errorf("refusing map version %d after version %d: versions only go up", m.Version(), old)
	}
	return nil
}
