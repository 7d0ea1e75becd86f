package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cellkit/cellkit/internal/backoff"
	"github.com/cellkit/cellkit/internal/slotmap"
)

const (
	lockSessionName    = "cellkit writer lock"
	lockMonitorRetries = 3
	lockAttempt        = time.Second     // one try of api.Lock; bounds how late a cancel is noticed
	cleanupTimeout     = 2 * time.Second // for calls made after the caller's ctx ended
)

// lockDelay is how long Consul refuses the lock after its holder's session
// was invalidated (not after a clean Unlock). It gives a holder that has not
// yet noticed the loss time to stop; every map write is a CAS on the version
// anyway, so a short delay suffices and a dead cellctl does not block the next
// one for Consul's default 15 s.
const lockDelay = time.Second

// Consul keeps the map in Consul's KV store at PREFIX/map and the writer lock
// at PREFIX/lock. The ACL token (unless ConsulConfig.Token gives one) and
// the TLS settings come from the usual CONSUL_HTTP_* environment variables.
type Consul struct {
	addr, prefix string
	conf         ConsulConfig
	opts         Options
	cfg          *api.Config
	client       *api.Client
}

var _ Registry = (*Consul)(nil)

// ConsulConfig locates and tunes a Consul registry. Zero values mean the
// defaults in brackets.
type ConsulConfig struct {
	// Addr is the Consul agent, host:port. Required.
	Addr string
	// Prefix is the key prefix: the map is at PREFIX/map [cellkit].
	Prefix string
	// PollInterval is the least time between two blocking queries of Watch
	// [50ms].
	PollInterval time.Duration
	// WatchWait is how long one blocking query may wait for a change before
	// it returns unchanged (which counts as a successful sync) [10s].
	WatchWait time.Duration
	// MaxBackoff caps the wait between failed rounds of a Watch [5s].
	MaxBackoff time.Duration
	// LockTTL is the session TTL of the writer lock: a holder that dies
	// without unlocking loses the lock within 2×LockTTL [10s, the smallest
	// TTL Consul accepts].
	LockTTL time.Duration
	// Token is the ACL token [$CONSUL_HTTP_TOKEN]: for a program that
	// talks to a Consul other than its environment's (loadtest net up).
	Token string
}

// DefaultConsulConfig returns the defaults in brackets above (the
// token's is the Consul client's).
func DefaultConsulConfig() ConsulConfig {
	return ConsulConfig{Prefix: "cellkit", PollInterval: 50 * time.Millisecond, WatchWait: 10 * time.Second,
		MaxBackoff: 5 * time.Second, LockTTL: 10 * time.Second}
}

// withDefaults fills the zero fields of c from DefaultConsulConfig, field
// by field.
func (c ConsulConfig) withDefaults() ConsulConfig {
	d := DefaultConsulConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.PollInterval <= 0 {
		c.PollInterval = d.PollInterval
	}
	if c.WatchWait <= 0 {
		c.WatchWait = d.WatchWait
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = d.MaxBackoff
	}
	if c.LockTTL <= 0 {
		c.LockTTL = d.LockTTL
	}
	return c
}

// NewConsul returns a registry in the Consul agent at cfg.Addr, under
// cfg.Prefix. It does not contact Consul.
func NewConsul(cfg ConsulConfig, opts Options) (*Consul, error) {
	if cfg.Addr == "" {
		return nil, errors.New("consul registry: no address")
	}
	cfg = cfg.withDefaults()
	acfg := api.DefaultConfig()
	acfg.Address = cfg.Addr
	if cfg.Token != "" {
		acfg.Token = cfg.Token
	}
	client, err := api.NewClient(acfg)
	if err != nil {
		return nil, fmt.Errorf("consul client for %s: %w", cfg.Addr, err)
	}
	return &Consul{addr: cfg.Addr, prefix: cfg.Prefix, conf: cfg, opts: opts, cfg: acfg, client: client}, nil
}

func (c *Consul) mapKey() string  { return c.prefix + "/map" }
func (c *Consul) lockKey() string { return c.prefix + "/lock" }

// KV is the registry's Consul key-value client, with its address and ACL
// token, for what is kept beside the map (the history of its versions).
func (c *Consul) KV() *api.KV { return c.client.KV() }

// Describe returns "consul://ADDR/PREFIX".
func (c *Consul) Describe() string { return "consul://" + c.addr + "/" + c.prefix }

// Close drops idle connections to the agent.
func (c *Consul) Close() error {
	if c.cfg.Transport != nil {
		c.cfg.Transport.CloseIdleConnections()
	}
	return nil
}

// Load reads the map consistently: a writer that plans against a stale map
// would only lose its CAS, but cellctl should show the truth.
func (c *Consul) Load(ctx context.Context) (*slotmap.Map, error) {
	pair, err := c.get(ctx)
	if err != nil {
		return nil, err
	}
	if pair == nil {
		return nil, ErrNoMap
	}
	return c.decode(pair)
}

// get reads the map key through the leader (RequireConsistent).
func (c *Consul) get(ctx context.Context) (*api.KVPair, error) {
	q := (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx)
	pair, _, err := c.client.KV().Get(c.mapKey(), q)
	if err != nil {
		return nil, fmt.Errorf("read consul key %s: %w", c.mapKey(), err)
	}
	return pair, nil
}

func (c *Consul) decode(pair *api.KVPair) (*slotmap.Map, error) {
	m, err := slotmap.Decode(pair.Value)
	if err != nil {
		return nil, fmt.Errorf("consul key %s (modify index %d): %w", pair.Key, pair.ModifyIndex, err)
	}
	return m, nil
}

// CompareAndSwap checks the stored version, then writes with Consul's own CAS
// on the key's ModifyIndex, so a writer that slipped in between loses too.
func (c *Consul) CompareAndSwap(ctx context.Context, old int64, m *slotmap.Map) error {
	if err := checkNext(old, m); err != nil {
		return err
	}
	data, err := m.Encode()
	if err != nil {
		return fmt.Errorf("encode map: %w", err)
	}
	pair, err := c.get(ctx)
	if err != nil {
		return err
	}
	var index uint64 // 0: create only if the key is absent
	switch {
	case pair == nil && old != 0:
		return fmt.Errorf("%w: want version %d, registry holds no map", ErrConflict, old)
	case pair != nil:
		cur, err := c.decode(pair)
		if err != nil {
			// A corrupt map is not overwritten blindly: someone must look at it.
			return fmt.Errorf("refusing to replace the current map: %w", err)
		}
		if cur.Version() != old {
			return fmt.Errorf("%w: want version %d, registry holds %d", ErrConflict, old, cur.Version())
		}
		index = pair.ModifyIndex
	}
	ok, _, err := c.client.KV().CAS(&api.KVPair{Key: c.mapKey(), Value: data, ModifyIndex: index},
		(&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("write consul key %s: %w", c.mapKey(), err)
	}
	if !ok {
		return fmt.Errorf("%w: consul key %s changed during the write", ErrConflict, c.mapKey())
	}
	return nil
}

// Watch runs blocking queries on the map key, rate-limited, backing off
// exponentially with jitter after failures.
func (c *Consul) Watch(ctx context.Context, after int64, fn func(Event)) {
	wait := c.conf.WatchWait
	minGap := c.conf.PollInterval
	last := after
	var index uint64
	failures := 0
	for {
		began := time.Now()
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(ctx)
		pair, meta, err := c.client.KV().Get(c.mapKey(), q)
		if ctx.Err() != nil {
			return
		}
		pause := minGap - time.Since(began)
		if err != nil {
			failures++
			fn(Event{Err: fmt.Errorf("watch consul key %s: %w", c.mapKey(), err), At: c.opts.now()})
			pause = backoff.Jittered(minGap, c.conf.MaxBackoff, failures)
			// Read afresh once the agent answers: it may have restarted with
			// lower indexes, and a query for an index it has not reached
			// would block for the whole wait.
			index = 0
		} else {
			failures = 0
			index = nextIndex(index, meta.LastIndex)
			ev := Event{At: c.opts.now()}
			if pair == nil {
				// Reachable but empty (a registry that lost its data) does
				// not confirm anyone's map, as with the file backend.
				ev.Err = ErrNoMap
			} else if m, err := c.decode(pair); err != nil {
				ev.Err = err
			} else {
				ev.Current = m.Version()
				if m.Version() > last {
					ev.Map, last = m, m.Version()
				}
			}
			fn(ev)
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
		}
	}
}

// nextIndex is the WaitIndex of the blocking query that follows one sent with
// prev that returned got, by Consul's rules: an index that went backwards
// (the agent lost its state) restarts with a plain read, and an index below 1
// is never used after that, since it would make every query return at once.
func nextIndex(prev, got uint64) uint64 {
	switch {
	case got < prev:
		return 0
	case got < 1:
		return 1
	}
	return got
}

// Lock takes the writer lock at PREFIX/lock with a Consul session that this
// process renews; the lock is lost when the session expires (the holder died:
// within 2×LockTTL) or is destroyed.
func (c *Consul) Lock(ctx context.Context, holder string) (Lock, error) {
	ttl := c.conf.LockTTL
	value, err := json.Marshal(newHolder(holder, c.opts.now()))
	if err != nil {
		return nil, fmt.Errorf("encode lock holder: %w", err)
	}
	// Our own session (rather than one api.Lock makes per attempt) survives
	// the repeated short attempts below.
	session, _, err := c.client.Session().Create(&api.SessionEntry{
		Name:      lockSessionName,
		TTL:       ttl.String(),
		LockDelay: lockDelay,
		Behavior:  api.SessionBehaviorRelease,
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return nil, &LockedError{Holder: c.holder(ctx), Err: ctx.Err()}
		}
		return nil, fmt.Errorf("create consul session for writer lock: %w", err)
	}
	renewCtx, stopRenew := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		// Returns when the session is gone or stopRenew is called; a lost
		// session also clears the lock key, which the api.Lock monitor sees.
		_ = c.client.Session().RenewPeriodic(ttl.String(), session, (&api.WriteOptions{}).WithContext(renewCtx), nil)
	}()
	l := &consulLock{client: c.client, session: session, stopRenew: stopRenew, renewed: renewed}

	for {
		// api.Lock ignores its stop channel while it waits in a blocking
		// query, and sleeps 5 s when it meets a lock delay: short attempts
		// bounded by ctx keep it from outliving ctx by more than lockAttempt.
		attempt := lockAttempt
		if dl, ok := ctx.Deadline(); ok {
			attempt = max(min(attempt, time.Until(dl)), time.Millisecond)
		}
		al, err := c.client.LockOpts(&api.LockOptions{
			Key:            c.lockKey(),
			Value:          value,
			Session:        session,
			MonitorRetries: lockMonitorRetries,
			LockTryOnce:    true,
			LockWaitTime:   attempt,
		})
		var lost <-chan struct{}
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, attempt)
			lost, err = al.Lock(actx.Done())
			cancel()
		}
		switch {
		case err != nil:
			l.abandon(ctx)
			return nil, fmt.Errorf("take writer lock %s: %w", c.lockKey(), err)
		case lost != nil:
			l.lock, l.lost = al, lost
			return l, nil
		case ctx.Err() != nil:
			l.abandon(ctx)
			return nil, &LockedError{Holder: c.holder(ctx), Err: ctx.Err()}
		}
	}
}

// holder reads who holds the lock, for a LockedError; ctx is already done.
func (c *Consul) holder(ctx context.Context) Holder {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	pair, _, err := c.client.KV().Get(c.lockKey(), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || pair == nil || pair.Session == "" {
		return Holder{}
	}
	var h Holder
	if json.Unmarshal(pair.Value, &h) != nil {
		return Holder{Holder: string(pair.Value)}
	}
	return h
}

// consulLock is a held writer lock.
type consulLock struct {
	client    *api.Client
	session   string
	lock      *api.Lock
	lost      <-chan struct{}
	stopRenew context.CancelFunc
	renewed   <-chan struct{}

	once sync.Once
	err  error
}

// Session is the Consul session holding the lock: destroying it (as when
// the holder dies) loses the lock.
func (l *consulLock) Session() string { return l.session }

func (l *consulLock) Lost() <-chan struct{} { return l.lost }

// Unlock releases the key first (no lock delay for the next writer, unlike a
// destroyed session), then destroys the session.
func (l *consulLock) Unlock(ctx context.Context) error {
	l.once.Do(func() {
		// api.Lock's Unlock takes no context; it fails fast when the agent is
		// down, and destroying the session releases the key anyway.
		err := l.lock.Unlock()
		if errors.Is(err, api.ErrLockNotHeld) {
			err = nil
		}
		if derr := l.release(ctx); derr != nil {
			err = errors.Join(err, derr)
		}
		if err != nil {
			l.err = fmt.Errorf("unlock writer lock: %w", err)
		}
	})
	return l.err
}

// abandon gives up the session of a lock that was never taken; ctx may be
// done already.
func (l *consulLock) abandon(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = l.release(ctx)
}

// release stops renewing and destroys the session.
func (l *consulLock) release(ctx context.Context) error {
	l.stopRenew()
	<-l.renewed
	// Destroying a session that is already gone succeeds.
	if _, err := l.client.Session().Destroy(l.session, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("destroy consul session %s: %w", l.session, err)
	}
	return nil
}
