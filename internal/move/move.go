// Package move is a cell's part in moving users between cells
// (docs/decisions/moving-users-data.md): its record of the moves it is
// in, kept in a JetStream bucket of the cell's so that every instance
// follows them and a restarted one finds them; the fence the moving
// users' new inquiries and attempts meet at the source; and the ledger's
// side of each step, which the control library drives through the
// cell's admin API.
package move

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/backoff"
	"github.com/cellkit/cellkit/internal/store"
)

// Errors of a move's steps, which the admin API answers as problems.
var (
	// ErrUnknown: the cell is in no move of that id.
	ErrUnknown = errors.New("no such move")
	// ErrConflict: the step does not fit the move's record (another spec
	// under the same id, a move that overlaps one under way, the wrong
	// role, a hand-over before the fence).
	ErrConflict = errors.New("move conflict")
)

// Bucket is the name of a cell's bucket of moves.
func Bucket(cell string) string { return "cellkit-" + cell + "-moves" }

// Config shapes a cell's part in moves.
type Config struct {
	// Cell is the cell's id. Required.
	Cell string
	// Replicas is the bucket's replica count [1], the ledger's.
	Replicas int
	// TTL is the records' life [store.DefaultTTL]: a copied message
	// lives what it had left of it.
	TTL time.Duration
}

// DefaultConfig returns the defaults in brackets above.
func DefaultConfig() Config {
	return Config{Replicas: 1, TTL: store.DefaultTTL}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Replicas = cmp.Or(max(c.Replicas, 0), d.Replicas)
	c.TTL = cmp.Or(c.TTL, d.TTL)
	return c
}

// Options carry a Mover's collaborators.
type Options struct {
	// Ledger is the cell's ledger. Required.
	Ledger *store.Ledger
	// SlotOf is a user's slot in the cell's map; false while the cell has
	// no map (nothing is fenced then: nothing is taken either). Required.
	SlotOf func(user string) (int, bool)
	// Logger hears of the bucket's watch failing. Nil means none.
	Logger *slog.Logger
	// Now is the clock. Nil means time.Now.
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

// Mover is a cell's part in moves. It is safe for concurrent use.
type Mover struct {
	cfg    Config
	ledger *store.Ledger
	kv     jetstream.KeyValue
	slotOf func(string) (int, bool)
	log    *slog.Logger
	now    func() time.Time

	mu    sync.RWMutex
	moves map[string]api.CellMove // as the bucket has them
}

// Open creates or opens cfg.Cell's bucket of moves and reads them.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config, opts Options) (*Mover, error) {
	if cfg.Cell == "" || opts.Ledger == nil || opts.SlotOf == nil {
		return nil, errors.New("move: the cell, its ledger and its map are required")
	}
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket(cfg.Cell),
		Description: "the moves of users cell " + cfg.Cell + " is in",
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("open the moves bucket: %w", err)
	}
	m := &Mover{cfg: cfg, ledger: opts.Ledger, kv: kv, slotOf: opts.SlotOf, log: opts.Logger, now: opts.Now, moves: map[string]api.CellMove{}}
	if err := m.load(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// load reads every move of the bucket.
func (m *Mover) load(ctx context.Context) error {
	lister, err := m.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("list moves: %w", err)
	}
	moves := map[string]api.CellMove{}
	for key := range lister.Keys() {
		e, err := m.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read move %s: %w", key, err)
		}
		var cm api.CellMove
		if err := json.Unmarshal(e.Value(), &cm); err != nil {
			return fmt.Errorf("read move %s: %w", key, err)
		}
		moves[key] = cm
	}
	m.mu.Lock()
	m.moves = moves
	m.mu.Unlock()
	return nil
}

// Follow keeps the moves as the bucket has them until ctx ends: another
// instance's fence holds here within a moment (and a change this
// instance makes holds here at once).
func (m *Mover) Follow(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := m.kv.WatchAll(ctx)
		if err != nil {
			m.log.Warn("cannot watch the moves bucket", "err", err)
			_ = backoff.Sleep(ctx, time.Second)
			continue
		}
		for e := range w.Updates() {
			if e == nil {
				continue // the initial values are all here
			}
			m.mu.Lock()
			var cm api.CellMove
			if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &cm) == nil {
				m.moves[e.Key()] = cm
			} else {
				delete(m.moves, e.Key())
			}
			m.mu.Unlock()
		}
		_ = w.Stop()
		_ = backoff.Sleep(ctx, time.Second)
	}
}

// Fenced reports whether user's new inquiries and attempts wait: a move
// out of this cell carries the user and is fenced.
func (m *Mover) Fenced(user string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if len(m.moves) == 0 {
		return false
	}
	slot, ok := m.slotOf(user)
	if !ok {
		return false
	}
	for _, cm := range m.moves {
		if cm.Role == api.MoveSource && cm.Fenced && cm.Spec.Moves(slot, user) {
			return true
		}
	}
	return false
}

// List returns the cell's moves, by id.
func (m *Mover) List() []api.CellMove {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []api.CellMove
	for _, id := range slices.Sorted(maps.Keys(m.moves)) {
		out = append(out, m.moves[id])
	}
	return out
}

// Get reads move id from the bucket.
func (m *Mover) Get(ctx context.Context, id string) (api.CellMove, error) {
	cm, _, err := m.get(ctx, id)
	return cm, err
}

func (m *Mover) get(ctx context.Context, id string) (api.CellMove, uint64, error) {
	var cm api.CellMove
	e, err := m.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return cm, 0, fmt.Errorf("%w %s in cell %s", ErrUnknown, id, m.cfg.Cell)
	}
	if err != nil {
		return cm, 0, fmt.Errorf("read move %s: %w", id, err)
	}
	if err := json.Unmarshal(e.Value(), &cm); err != nil {
		return cm, 0, fmt.Errorf("read move %s: %w", id, err)
	}
	cm.RecordTTLSeconds = int64(m.cfg.TTL / time.Second)
	return cm, e.Revision(), nil
}

// Put records the cell's part in a move, or changes its fence: the spec
// of a move once recorded never changes, a cell is a move's source or
// its destination as the spec says, and two moves under way in one cell
// share no slot. Putting what is recorded changes nothing. It returns the
// cell's record.
func (m *Mover) Put(ctx context.Context, cm api.CellMove, slots int) (api.CellMove, error) {
	if err := cm.Spec.Check(slots); err != nil {
		return api.CellMove{}, err
	}
	switch {
	case cm.Role == api.MoveSource && cm.Spec.From != m.cfg.Cell, cm.Role == api.MoveDestination && cm.Spec.To != m.cfg.Cell:
		return api.CellMove{}, fmt.Errorf("%w: cell %s is not the %s of move %s (from %s to %s)", ErrConflict, m.cfg.Cell, cm.Role, cm.Spec.ID, cm.Spec.From, cm.Spec.To)
	case cm.Role != api.MoveSource && cm.Role != api.MoveDestination:
		return api.CellMove{}, fmt.Errorf("%w: move %s: role %q: want %s or %s", api.ErrBadMoveSpec, cm.Spec.ID, cm.Role, api.MoveSource, api.MoveDestination)
	case cm.Fenced && cm.Role != api.MoveSource:
		return api.CellMove{}, fmt.Errorf("%w: only a move's source is fenced", ErrConflict)
	}
	cur, rev, err := m.get(ctx, cm.Spec.ID)
	switch {
	case errors.Is(err, ErrUnknown):
		if err := m.overlaps(cm.Spec); err != nil {
			return api.CellMove{}, err
		}
		cm.Since = m.now().UTC()
	case err != nil:
		return api.CellMove{}, err
	case !sameSpec(cur.Spec, cm.Spec) || cur.Role != cm.Role:
		return api.CellMove{}, fmt.Errorf("%w: move %s is recorded with another spec", ErrConflict, cm.Spec.ID)
	case cur.Fenced == cm.Fenced:
		return cur, nil
	default:
		cm.Since = cur.Since
	}
	cm.Inflight, cm.RecordTTLSeconds = 0, 0
	b, err := json.Marshal(cm)
	if err != nil {
		return api.CellMove{}, err
	}
	if rev == 0 {
		_, err = m.kv.Create(ctx, cm.Spec.ID, b)
	} else {
		_, err = m.kv.Update(ctx, cm.Spec.ID, b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		return api.CellMove{}, fmt.Errorf("%w: move %s was written meanwhile", ErrConflict, cm.Spec.ID)
	}
	if err != nil {
		return api.CellMove{}, fmt.Errorf("record move %s: %w", cm.Spec.ID, err)
	}
	m.mu.Lock()
	m.moves[cm.Spec.ID] = cm
	m.mu.Unlock()
	cm.RecordTTLSeconds = int64(m.cfg.TTL / time.Second)
	return cm, nil
}

// overlaps says which move under way shares a slot with spec.
func (m *Mover) overlaps(spec api.MoveSpec) error {
	mine := spec.ScanSlots()
	m.mu.RLock()
	defer m.mu.RUnlock()
	for id, cm := range m.moves {
		for _, s := range cm.Spec.ScanSlots() {
			if _, ok := slices.BinarySearch(mine, s); ok {
				return fmt.Errorf("%w: move %s of cell %s is under way over slot %d", ErrConflict, id, m.cfg.Cell, s)
			}
		}
	}
	return nil
}

func sameSpec(a, b api.MoveSpec) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// Delete forgets move id (the fence goes with it). Forgetting a move the
// cell is not in is not an error.
func (m *Mover) Delete(ctx context.Context, id string) error {
	if err := m.kv.Purge(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("forget move %s: %w", id, err)
	}
	m.mu.Lock()
	delete(m.moves, id)
	m.mu.Unlock()
	return nil
}

// role reads move id and checks the cell's role in it.
func (m *Mover) role(ctx context.Context, id, role string) (api.CellMove, error) {
	cm, err := m.Get(ctx, id)
	if err != nil {
		return cm, err
	}
	if role != "" && cm.Role != role {
		return cm, fmt.Errorf("%w: cell %s is the %s of move %s, not its %s", ErrConflict, m.cfg.Cell, cm.Role, id, role)
	}
	return cm, nil
}

// filter is the ledger's filter of a move's users: a message without a
// slot in its id is chosen by its record's user's slot.
func (m *Mover) filter(spec api.MoveSpec) store.MoveFilter {
	return func(slot int, user string) bool {
		if slot == api.NoSlot {
			s, ok := m.slotOf(user)
			if !ok {
				return false
			}
			slot = s
		}
		return spec.Moves(slot, user)
	}
}

// maxPage is the most messages a page of an export carries.
const maxPage = 1000

// Export is a page of the source's messages of move id's users after
// sequence after, up to limit (at most maxPage), in slots (nil: all the
// Size measures what spec would carry out of this cell (its id is not
// looked up: nothing is recorded); slots is the map's slot count.
func (m *Mover) Size(ctx context.Context, spec api.MoveSpec, slots int) (api.MoveSize, error) {
	if err := spec.Check(slots); err != nil {
		return api.MoveSize{}, err
	}
	n, b, err := m.ledger.Measure(ctx, spec.ScanSlots(), m.filter(spec))
	return api.MoveSize{Messages: n, Bytes: b}, err
}

// move's).
func (m *Mover) Export(ctx context.Context, id string, after uint64, limit int, slots []int) (api.MovePage, error) {
	cm, err := m.role(ctx, id, api.MoveSource)
	if err != nil {
		return api.MovePage{}, err
	}
	page := api.MovePage{Messages: []api.MovedMessage{}}
	page.Next, page.Done, err = m.ledger.Export(ctx, after, within(cm.Spec, slots), m.filter(cm.Spec), min(max(limit, 1), maxPage), func(msg api.MovedMessage) error {
		page.Messages = append(page.Messages, msg)
		return nil
	})
	return page, err
}

// Import writes a page of the source's messages into the destination's
// ledger; each must be of a user the move carries.
func (m *Mover) Import(ctx context.Context, id string, page api.MovePage) error {
	cm, err := m.role(ctx, id, api.MoveDestination)
	if err != nil {
		return err
	}
	want := m.filter(cm.Spec)
	for _, msg := range page.Messages {
		var rec struct {
			ID     string `json:"id"`
			UserID string `json:"user_id"`
		}
		if err := json.Unmarshal(msg.Record, &rec); err != nil {
			return fmt.Errorf("move %s: message %d: %w", id, msg.Seq, err)
		}
		_, slot, _, ok := api.ParseInquiryID(rec.ID)
		if !ok || !want(slot, rec.UserID) {
			return fmt.Errorf("%w: move %s does not carry inquiry %q of user %q", ErrConflict, id, rec.ID, rec.UserID)
		}
		if err := m.ledger.Import(ctx, id, msg, m.cfg.TTL, m.now()); err != nil {
			return err
		}
	}
	return nil
}

// Digest digests move id's users' messages written after horizon.
func (m *Mover) Digest(ctx context.Context, id string, horizon time.Time) (api.MoveDigest, error) {
	cm, err := m.role(ctx, id, "")
	if err != nil {
		return api.MoveDigest{}, err
	}
	slots, err := m.ledger.Digest(ctx, cm.Spec.ScanSlots(), m.filter(cm.Spec), copies(cm), horizon)
	return api.MoveDigest{Slots: slots}, err
}

// Hand hands the source's pending inquiries of move id's users over
// (see store.Ledger.Hand); the move must be fenced. It returns how many
// it handed.
func (m *Mover) Hand(ctx context.Context, id string) (int, error) {
	cm, err := m.role(ctx, id, api.MoveSource)
	if err != nil {
		return 0, err
	}
	if !cm.Fenced {
		return 0, fmt.Errorf("%w: move %s is not fenced: its users' inquiries would be worked on here while handed", ErrConflict, id)
	}
	return m.ledger.HandAll(ctx, cm.Spec.ScanSlots(), m.filter(cm.Spec), store.HandJob(id))
}

// Discard lets the messages of move id's users go, in slots (nil: all the
// move's).
func (m *Mover) Discard(ctx context.Context, id string, slots []int) error {
	cm, err := m.role(ctx, id, "")
	if err != nil {
		return err
	}
	return m.ledger.Discard(ctx, within(cm.Spec, slots), m.filter(cm.Spec), cm.Spec.Whole, copies(cm))
}

// copies is the move whose copies alone a step of cm's touches: at the
// destination, which may hold the users' inquiries of its own (they are
// its users already, or a change left some there), cm's; at the source,
// "" (all the users' messages).
func copies(cm api.CellMove) string {
	if cm.Role == api.MoveDestination {
		return cm.Spec.ID
	}
	return ""
}

// within is the slots of spec's among slots (nil: all of spec's).
func within(spec api.MoveSpec, slots []int) []int {
	scan := spec.ScanSlots()
	if slots == nil {
		return scan
	}
	return slices.DeleteFunc(slices.Clone(slots), func(s int) bool { _, ok := slices.BinarySearch(scan, s); return !ok })
}

// Activate makes the inquiries handed in move id work: at the
// destination, once the map gives it the users; at the source, for a move
// called off.
func (m *Mover) Activate(ctx context.Context, id string) (int, error) {
	cm, err := m.role(ctx, id, "")
	if err != nil {
		return 0, err
	}
	return m.ledger.Activate(ctx, cm.Spec.ScanSlots(), m.filter(cm.Spec), cm.Spec.ID, m.now())
}
