// Package hotkeys finds the heaviest keys of a stream over a sliding window
// in bounded memory: the edge router feeds it every user id it routes, and
// an operator (or cellctl) asks for the top users of the last minute to pin
// them to a cell of their own with an override.
//
// It is the space-saving algorithm (Metwally, Agrawal, El Abbadi 2005) run
// per time bucket and per shard:
//
//   - Memory is fixed: Capacity counters per bucket, Buckets buckets.
//   - Every key whose true count over the window exceeds about
//     window total / (Capacity/Shards) is reported, with its count
//     overestimated by at most its Error (the count of the key it evicted).
//   - Keys are sharded by the caller's hash, so each key lives in one shard
//     and concurrent writers rarely share a lock.
//
// It is pure apart from an injected clock; it starts no goroutines.
package hotkeys

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Config sizes a Tracker. Zero values mean the defaults in brackets (see
// DefaultConfig).
type Config struct {
	Window   time.Duration // how far back Top looks [1m]
	Buckets  int           // the window is kept as this many buckets [6]
	Capacity int           // counters per bucket, over all shards [1024]
	Shards   int           // lock shards, rounded up to a power of two [8]
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Window: time.Minute, Buckets: 6, Capacity: 1024, Shards: 8}
}

// withDefaults fills the zero fields of c and rounds Shards up to a power
// of two, with at least one counter per shard.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Window <= 0 {
		c.Window = d.Window
	}
	if c.Buckets <= 0 {
		c.Buckets = d.Buckets
	}
	if c.Shards <= 0 {
		c.Shards = d.Shards
	}
	n := 1
	for n < c.Shards {
		n <<= 1
	}
	c.Shards = n
	if c.Capacity <= 0 {
		c.Capacity = d.Capacity
	}
	c.Capacity = max(c.Capacity, c.Shards)
	return c
}

// Options carry the tracker's collaborators. The zero value is usable.
type Options struct {
	// Now is the clock that picks the buckets. Nil means time.Now.
	Now func() time.Time
}

// withDefaults fills the nil collaborators that have a default: Now
// (time.Now).
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Tracker counts keys. It is safe for concurrent use.
type Tracker struct {
	cfg    Config
	now    func() time.Time
	bucket time.Duration
	mask   uint64
	shards []shard
}

type shard struct {
	mu   sync.Mutex
	ring []summary // one per bucket, indexed by epoch % Buckets
	_    [40]byte  // keep shards on separate cache lines
}

// New returns an empty tracker.
func New(cfg Config, opts Options) *Tracker {
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	now := opts.Now
	t := &Tracker{
		cfg:    cfg,
		now:    now,
		bucket: cfg.Window / time.Duration(cfg.Buckets),
		mask:   uint64(cfg.Shards - 1),
		shards: make([]shard, cfg.Shards),
	}
	per := cfg.Capacity / cfg.Shards
	for i := range t.shards {
		t.shards[i].ring = make([]summary, cfg.Buckets)
		for j := range t.shards[i].ring {
			t.shards[i].ring[j] = newSummary(per)
		}
	}
	return t
}

func (t *Tracker) epoch(at time.Time) int64 { return at.UnixNano() / int64(t.bucket) }

// Add counts one occurrence of key. hash is any well-mixed hash of key (the
// router passes the slot hash it computed anyway); it picks the shard. Add
// does not retain key and allocates only when key is new in its bucket.
func (t *Tracker) Add(key []byte, hash uint64) {
	e := t.epoch(t.now())
	sh := &t.shards[hash&t.mask]
	sh.mu.Lock()
	s := &sh.ring[e%int64(len(sh.ring))]
	if s.epoch != e {
		s.reset(e)
	}
	s.add(key)
	sh.mu.Unlock()
}

// Key is one heavy key of the window.
type Key struct {
	Key   string `json:"key"`
	Count int64  `json:"count"` // estimated occurrences in the window (never below the true count)
	Error int64  `json:"error"` // how much Count may overestimate
}

// Report is the answer of Top.
type Report struct {
	Window time.Duration `json:"-"`
	Total  int64         `json:"total"` // every Add in the window
	Keys   []Key         `json:"keys"`  // heaviest first
}

// Top returns the n heaviest keys of the window (all tracked keys if n <= 0).
func (t *Tracker) Top(n int) Report {
	e := t.epoch(t.now())
	oldest := e - int64(t.cfg.Buckets) + 1
	rep := Report{Window: t.cfg.Window}
	var keys []Key
	for i := range t.shards {
		sh := &t.shards[i]
		merged := map[string]Key{}
		sh.mu.Lock()
		for j := range sh.ring {
			s := &sh.ring[j]
			if s.epoch < oldest || s.epoch > e {
				continue
			}
			rep.Total += s.total
			for _, c := range s.heap {
				k := merged[c.key]
				k.Key = c.key
				k.Count += c.count
				k.Error += c.err
				merged[c.key] = k
			}
		}
		sh.mu.Unlock()
		for _, k := range merged {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b Key) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if n > 0 && len(keys) > n {
		keys = keys[:n]
	}
	rep.Keys = keys
	return rep
}

// summary is one space-saving sketch: at most cap counters in a min-heap by
// count, indexed by key.
type summary struct {
	epoch int64
	total int64
	cap   int
	heap  []counter
	index map[string]int // key → position in heap
}

type counter struct {
	key   string
	count int64
	err   int64
}

func newSummary(capacity int) summary {
	return summary{epoch: -1, cap: capacity, heap: make([]counter, 0, capacity), index: make(map[string]int, capacity)}
}

func (s *summary) reset(epoch int64) {
	s.epoch, s.total = epoch, 0
	s.heap = s.heap[:0]
	clear(s.index)
}

func (s *summary) add(key []byte) {
	s.total++
	if i, ok := s.index[string(key)]; ok {
		s.heap[i].count++
		s.down(i)
		return
	}
	if len(s.heap) < s.cap {
		k := string(key)
		s.heap = append(s.heap, counter{key: k, count: 1})
		i := len(s.heap) - 1
		s.index[k] = i
		s.up(i)
		return
	}
	// Evict the smallest counter: the new key inherits its count as error.
	min := s.heap[0]
	delete(s.index, min.key)
	k := string(key)
	s.heap[0] = counter{key: k, count: min.count + 1, err: min.count}
	s.index[k] = 0
	s.down(0)
}

func (s *summary) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.index[s.heap[i].key] = i
	s.index[s.heap[j].key] = j
}

func (s *summary) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.heap[p].count <= s.heap[i].count {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *summary) down(i int) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.heap[r].count < s.heap[l].count {
			m = r
		}
		if s.heap[i].count <= s.heap[m].count {
			return
		}
		s.swap(i, m)
		i = m
	}
}
