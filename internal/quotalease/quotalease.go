// Package quotalease shares a cell's agency session quotas among the
// cell's instances without ever letting them hold more sessions than the
// quota, also while an instance dies, joins or is cut off.
//
// The quota of an agency is Q session slots, keys q.AGENCY.K (K < Q) of a
// JetStream key-value bucket of the cell (its instances share the cell's
// JetStream cluster). An instance may open a session to an agency only for
// a slot it holds a lease on. A lease is a key the instance created
// (Create fails while another holds it) and rewrites every Lease/3 with
// compare-and-set on its revision; the bucket's TTL removes a key
// Lease+Grace after its last write.
//
// The bound: the holder counts on a lease only until Lease after it SENT
// the write that last renewed it (its own clock), and before that moment
// its session limit drops and its sessions beyond it are closed. The key
// lives on until Lease+Grace after the server RECEIVED that write, which
// is later. So a slot is taken by another instance only after its former
// holder stopped counting on it, and Grace more: time for the agency to
// see a dead holder's sessions go (its idle timeout, for sessions whose
// host vanished without a FIN). Σ sessions ≤ Σ leases held ≤ Q.
//
// Each instance also writes a heartbeat key (i.INSTANCE) each round; the
// instances whose heartbeat is in the bucket share each quota evenly (the
// first Q mod n in id order one more). An instance over its share releases
// slots once its sessions fit what it keeps; an instance under it claims
// free slots. A dead instance's slots come back to the others Lease+Grace
// after its last round.
package quotalease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
)

// Config tunes a Leaser. Zero values mean the defaults in brackets.
type Config struct {
	// Instance names this instance in its cell (required).
	Instance string
	// Lease is how long the holder counts on a lease after sending its
	// last renewal [6s]; leases are renewed every Lease/3.
	Lease time.Duration
	// Grace is how much longer the bucket keeps a lease than its holder
	// counts on it: at least the agencies' idle timeout for a session
	// whose peer vanished [30s].
	Grace time.Duration
}

// Sessions is what a Leaser drives: the session pool of each agency.
type Sessions interface {
	// Limit sets how many sessions the agency's pool may hold and returns
	// how many it holds now (it closes idle ones beyond the limit at once,
	// busy ones when they come back).
	Limit(agency string, n int) (open int)
}

// Options carry a Leaser's collaborators.
type Options struct {
	// KV is the cell's lease bucket (see Bucket). Required.
	KV jetstream.KeyValue
	// Sessions are the pools the leases allow sessions to. Required.
	Sessions   Sessions
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the clock the holder fences itself with. Nil: time.Now.
	Now func() time.Time
}

// withDefaults fills the nil collaborators that have a default: Logger
// (none) and Now (time.Now).
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// BucketConfig is the lease bucket of a cell: its keys live lease+grace
// after their last write.
func BucketConfig(cell string, cfg Config, replicas int) jetstream.KeyValueConfig {
	cfg = cfg.withDefaults()
	return jetstream.KeyValueConfig{
		Bucket:      "cellkit_leases_" + cell,
		Description: "agency session leases of cell " + cell + "'s instances",
		History:     1,
		TTL:         cfg.Lease + cfg.Grace,
		Storage:     jetstream.MemoryStorage,
		Replicas:    max(replicas, 1),
	}
}

// DefaultConfig returns the defaults in brackets above.
func DefaultConfig() Config {
	return Config{Lease: 6 * time.Second, Grace: 30 * time.Second}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Lease <= 0 {
		c.Lease = d.Lease
	}
	if c.Grace <= 0 {
		c.Grace = d.Grace
	}
	return c
}

// lease is one slot this instance holds.
type lease struct {
	rev    uint64
	sentAt time.Time // when the write that last renewed it was sent
}

// Leaser keeps this instance's leases. Run drives it.
type Leaser struct {
	cfg  Config
	kv   jetstream.KeyValue
	ses  Sessions
	log  *slog.Logger
	now  func() time.Time
	held map[string]map[int]*lease // agency → slot → lease
	// lapsed are slots this instance stopped counting on (not renewed for
	// Lease) whose keys may still name it: taken back if they do.
	lapsed map[string]map[int]bool

	mu     sync.Mutex
	quotas map[string]int // the map's quota of the cell per agency
	share  map[string]int // this instance's share, last round
	live   int            // instances live at the last round

	limitG *prometheus.GaugeVec
}

// New returns a Leaser; it holds nothing until Run.
func New(cfg Config, opts Options) (*Leaser, error) {
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	if cfg.Instance == "" || strings.ContainsAny(cfg.Instance, ".*> ") {
		return nil, fmt.Errorf("quotalease: instance %q: want a name without '.', '*', '>' or spaces", cfg.Instance)
	}
	if opts.KV == nil || opts.Sessions == nil {
		return nil, errors.New("quotalease: a bucket and the sessions are required")
	}
	log := opts.Logger
	now := opts.Now
	return &Leaser{
		cfg: cfg, kv: opts.KV, ses: opts.Sessions, log: log.With("instance", cfg.Instance), now: now,
		held: map[string]map[int]*lease{}, lapsed: map[string]map[int]bool{}, quotas: map[string]int{}, share: map[string]int{},
		limitG: metric.GaugeVec(opts.Registerer, api.MetricCellSessionLeases),
	}, nil
}

// SetQuota sets the cell's quotas (from the map); Run shares them out.
func (l *Leaser) SetQuota(quotas map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.quotas = copyMap(quotas)
}

func copyMap(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Share is this instance's share of each agency's quota as of the last
// round.
func (l *Leaser) Share() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return copyMap(l.share)
}

// Live is how many instances of the cell had their heartbeat in the
// bucket at the last round (this one included); 1 before the first.
func (l *Leaser) Live() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(1, l.live)
}

// Run renews, claims and releases leases every Lease/3 until ctx ends;
// then it drops the session limits to 0 and releases what it holds.
func (l *Leaser) Run(ctx context.Context) error {
	t := time.NewTicker(l.cfg.Lease / 3)
	defer t.Stop()
	for {
		l.round(ctx)
		select {
		case <-ctx.Done():
			l.release()
			return nil
		case <-t.C:
		}
	}
}

// round is one renewal round.
func (l *Leaser) round(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, l.cfg.Lease/3)
	defer cancel()
	l.mu.Lock()
	quotas := copyMap(l.quotas)
	l.mu.Unlock()

	live, err := l.heartbeat(rctx)
	if err != nil {
		l.log.Warn("cannot reach the lease bucket", "err", err)
	}
	for agency := range l.held {
		if _, ok := quotas[agency]; !ok {
			quotas[agency] = 0 // an agency gone from the map: release its slots
		}
	}
	share := map[string]int{}
	for agency, q := range quotas {
		share[agency] = shareOf(q, live, l.cfg.Instance)
		l.renew(rctx, agency)
		l.fit(rctx, agency, q, share[agency])
	}
	l.mu.Lock()
	l.share, l.live = share, len(live)
	l.mu.Unlock()
}

// heartbeat writes this instance's key and lists the live instances.
func (l *Leaser) heartbeat(ctx context.Context) ([]string, error) {
	if _, err := l.kv.Put(ctx, "i."+l.cfg.Instance, []byte(strconv.FormatInt(l.now().UnixMilli(), 10))); err != nil {
		return []string{l.cfg.Instance}, err
	}
	lister, err := l.kv.ListKeysFiltered(ctx, "i.*")
	if err != nil {
		return []string{l.cfg.Instance}, err
	}
	live := []string{}
	for k := range lister.Keys() {
		live = append(live, strings.TrimPrefix(k, "i."))
	}
	if !slices.Contains(live, l.cfg.Instance) {
		live = append(live, l.cfg.Instance)
	}
	slices.Sort(live)
	return live, nil
}

// shareOf is an instance's share of q among live (sorted): q/n, and one
// more for the first q mod n.
func shareOf(q int, live []string, me string) int {
	n := len(live)
	i := slices.Index(live, me)
	if n == 0 || i < 0 {
		return 0
	}
	s := q / n
	if i < q%n {
		s++
	}
	return s
}

func key(agency string, slot int) string { return "q." + agency + "." + strconv.Itoa(slot) }

// renew rewrites every lease held for agency; a lease whose key is gone
// or was taken is dropped at once.
func (l *Leaser) renew(ctx context.Context, agency string) {
	for slot, ls := range l.held[agency] {
		sent := l.now()
		rev, err := l.kv.Update(ctx, key(agency, slot), []byte(l.cfg.Instance), ls.rev)
		if errors.Is(err, jetstream.ErrKeyExists) {
			// Another revision than the one this instance last knew:
			// taken by another after it expired, or still this instance's,
			// rewritten by an earlier renewal whose answer was lost (it
			// timed out here and was applied there). Only the holder
			// writes its name, so a key naming this instance is still its
			// own: renewed at the revision read.
			if e, gerr := l.kv.Get(ctx, key(agency, slot)); gerr == nil && string(e.Value()) == l.cfg.Instance {
				sent = l.now()
				rev, err = l.kv.Update(ctx, key(agency, slot), []byte(l.cfg.Instance), e.Revision())
			}
		}
		switch {
		case err == nil:
			ls.rev, ls.sentAt = rev, sent
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
			// Lost (it expired while this instance could not renew it):
			// it no longer counts, whatever the time.
			l.log.Warn("lost a session lease", "agency", agency, "slot", slot, "err", err)
			delete(l.held[agency], slot)
		default:
			// Not renewed this round: it counts until Lease after its last
			// renewal.
		}
	}
}

// usable is how many of agency's leases count now.
func (l *Leaser) usable(agency string) int {
	now, n := l.now(), 0
	for _, ls := range l.held[agency] {
		if now.Sub(ls.sentAt) < l.cfg.Lease {
			n++
		}
	}
	return n
}

// fit claims or releases agency's slots toward share, and sets the
// session limit to the leases that count.
func (l *Leaser) fit(ctx context.Context, agency string, q, share int) {
	h := l.held[agency]
	if h == nil {
		h = map[int]*lease{}
		l.held[agency] = h
	}
	// Drop leases that no longer count (not renewed for Lease): the
	// limit goes down first, the key is left to expire.
	now := l.now()
	lapsed := l.lapsed[agency]
	if lapsed == nil {
		lapsed = map[int]bool{}
		l.lapsed[agency] = lapsed
	}
	for slot, ls := range h {
		if now.Sub(ls.sentAt) >= l.cfg.Lease {
			delete(h, slot)
			lapsed[slot] = true
		}
	}
	// Release what is beyond the quota or the share (the highest slots),
	// once the sessions fit without it.
	mine := make([]int, 0, len(h))
	for slot := range h {
		mine = append(mine, slot)
	}
	slices.Sort(mine)
	var extra []int
	kept := 0
	for _, slot := range mine {
		if slot < q && kept < share {
			kept++
		} else {
			extra = append(extra, slot)
		}
	}
	// Until they are released, the limit stays at what is kept: the
	// sessions beyond it close as they come back from their calls.
	pending := 0
	if len(extra) > 0 {
		keep := len(h) - len(extra)
		pending = len(extra)
		if open := l.ses.Limit(agency, min(keep, l.usable(agency))); open <= keep {
			for _, slot := range extra {
				_ = l.kv.Delete(ctx, key(agency, slot), jetstream.LastRevision(h[slot].rev)) // a lease not deleted expires with its TTL
				delete(h, slot)
			}
			pending = 0
		}
	}
	// Claim free slots up to the share.
	for slot := 0; slot < q && len(h) < share; slot++ {
		if _, mine := h[slot]; mine {
			continue
		}
		sent := l.now()
		rev, err := l.kv.Create(ctx, key(agency, slot), []byte(l.cfg.Instance))
		if errors.Is(err, jetstream.ErrKeyExists) && lapsed[slot] {
			// Still this instance's from before it stopped counting on it
			// (it could not renew for Lease, cut off from the bucket): no
			// one else can hold it, so it is taken back at its revision
			// rather than waited out for Grace.
			if e, gerr := l.kv.Get(ctx, key(agency, slot)); gerr == nil && string(e.Value()) == l.cfg.Instance {
				sent = l.now()
				rev, err = l.kv.Update(ctx, key(agency, slot), []byte(l.cfg.Instance), e.Revision())
			} else if gerr == nil || errors.Is(gerr, jetstream.ErrKeyNotFound) {
				delete(lapsed, slot) // another's now, or gone: nothing to take back
			}
		}
		if err == nil {
			delete(lapsed, slot)
			h[slot] = &lease{rev: rev, sentAt: sent}
		} else if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
			break // the bucket is unreachable: try next round
		}
	}
	n := min(l.usable(agency), len(h)-pending)
	l.ses.Limit(agency, n)
	l.limitG.WithLabelValues(agency).Set(float64(n))
}

// release drops every limit to 0 and deletes the leases once the
// sessions are closed (best effort: what is not deleted expires).
func (l *Leaser) release() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for agency, h := range l.held {
		open := l.ses.Limit(agency, 0)
		l.limitG.WithLabelValues(agency).Set(0)
		if open > 0 {
			continue // busy sessions: their slots expire instead
		}
		for slot, ls := range h {
			_ = l.kv.Delete(ctx, key(agency, slot), jetstream.LastRevision(ls.rev)) // as above
		}
	}
	_ = l.kv.Delete(ctx, "i."+l.cfg.Instance) // expires with its TTL too
}
