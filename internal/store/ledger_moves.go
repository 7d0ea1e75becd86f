package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inquiry"
)

// What a move does to a ledger (docs/decisions/moving-users-data.md): the
// source's messages of the moving users are copied to the destination's
// ledger as they are, in the source's order, except that an accepted
// inquiry's "new" message arrives as "hold" (kept, read, not worked);
// the source hands each pending inquiry over with a "hand" message (the
// record under a job no message of the source carries: the source's
// workers drop its work as stale, a worker still in flight cannot write
// over it), and the destination turns the hand messages it holds into
// work once the map gives it the users.

// Kinds of a moving inquiry's messages.
const (
	// KindHold is a "new" message copied from another cell: history, not
	// work.
	KindHold = "hold"
	// KindHand is a pending inquiry handed to another cell: its record,
	// under a job of the move's.
	KindHand = "hand"
)

// headerWritten carries a copied message's first writing time (RFC 3339)
// through moves: its life is counted from it.
const headerWritten = api.HeaderWritten

// headerMovedIn names the move a copied message came in with: the
// destination's digest, discard and activation touch its copies alone,
// never what it held of the users before (its own, or what an earlier
// change left there).
const headerMovedIn = api.HeaderMovedIn

// movedIn reports whether m is one of move's copies ("": any message).
func movedIn(m jetstream.Msg, move string) bool {
	return move == "" || (m.Headers() != nil && m.Headers().Get(headerMovedIn) == move)
}

// MoveFilter chooses the messages a move carries: the slot of its
// subject (api.NoSlot for an id without one) and its record's user.
type MoveFilter func(slot int, user string) bool

// Export calls fn with each message after sequence after that want
// chooses, oldest first, up to limit of them; it returns the sequence to
// continue after and whether the ledger had no more. slots, if not nil,
// are the only slots want can choose (a subject filter each: the file
// store reads only those slots' messages).
func (j *Ledger) Export(ctx context.Context, after uint64, slots []int, want MoveFilter, limit int, fn func(api.MovedMessage) error) (next uint64, done bool, err error) {
	next = after
	err = j.scan(ctx, after, slots, limit, func(m jetstream.Msg, md *jetstream.MsgMetadata, slot int, rec moveRecord) error {
		next = md.Sequence.Stream
		if !want(slot, rec.UserID) {
			return nil
		}
		kind, _, _ := subjectKind(m.Subject())
		return fn(api.MovedMessage{Seq: md.Sequence.Stream, Kind: kind, Written: writtenAt(m, md), Record: m.Data()})
	})
	if errors.Is(err, errScanLimit) {
		return next, false, nil
	}
	return next, err == nil, err
}

// Measure counts the messages want chooses in slots and their records'
// bytes (what an export would carry).
func (j *Ledger) Measure(ctx context.Context, slots []int, want MoveFilter) (messages, bytes int, err error) {
	err = j.scan(ctx, 0, slots, 0, func(m jetstream.Msg, _ *jetstream.MsgMetadata, slot int, rec moveRecord) error {
		if want(slot, rec.UserID) {
			messages++
			bytes += len(m.Data())
		}
		return nil
	})
	return messages, bytes, err
}

// Import writes m into the ledger as the source had it ("new" as
// "hold"), marked as move's copy, to live as long as it had left there; a
// message whose life is over is skipped. Writing one message twice
// leaves one.
func (j *Ledger) Import(ctx context.Context, move string, m api.MovedMessage, ttl time.Duration, now time.Time) error {
	var rec moveRecord
	if err := json.Unmarshal(m.Record, &rec); err != nil || rec.ID == "" {
		return fmt.Errorf("import: an undecodable record of seq %d", m.Seq)
	}
	kind := m.Kind
	switch kind {
	case KindNew:
		kind = KindHold
	case KindHold, KindRec, KindFail, KindDead, KindHand:
	default:
		return fmt.Errorf("import: inquiry %s: unknown kind %q", rec.ID, m.Kind)
	}
	left := m.Written.Add(ttl).Sub(now)
	if left < time.Second {
		return nil // its life is over: it is gone at the source too
	}
	msg := &nats.Msg{Subject: LedgerSubject(j.cell, kind, rec.Priority, rec.ID), Data: m.Record, Header: nats.Header{}}
	msg.Header.Set(headerWritten, m.Written.UTC().Format(time.RFC3339Nano))
	msg.Header.Set(headerMovedIn, move)
	if _, err := j.js.PublishMsg(ctx, msg, jetstream.WithMsgTTL(left.Truncate(time.Second)), jetstream.WithRetryAttempts(0)); err != nil {
		return fmt.Errorf("import inquiry %s: %w", rec.ID, err)
	}
	return nil
}

// Digest digests, per slot, the messages want chooses that were first
// written after horizon (older ones may be expiring on one side and not
// yet on the other): how many, and the sum of their hashes (kind,
// inquiry and bytes), which does not depend on their order. "hold"
// counts as "new". copies, if not "", counts that move's copies alone
// (the destination's side).
func (j *Ledger) Digest(ctx context.Context, slots []int, want MoveFilter, copies string, horizon time.Time) (map[int]api.SlotDigest, error) {
	out := map[int]api.SlotDigest{}
	err := j.scan(ctx, 0, slots, 0, func(m jetstream.Msg, md *jetstream.MsgMetadata, slot int, rec moveRecord) error {
		if !want(slot, rec.UserID) || !movedIn(m, copies) || !writtenAt(m, md).After(horizon) {
			return nil
		}
		kind, tokens, _ := subjectKind(m.Subject())
		if kind == KindHold {
			kind = KindNew
		}
		h := xxhash.New()
		_, _ = h.WriteString(kind)
		_, _ = h.WriteString("\x00" + tokens + "\x00")
		_, _ = h.Write(m.Data())
		d := out[slot]
		d.Messages++
		d.Sum += h.Sum64()
		out[slot] = d
		return nil
	})
	return out, err
}

// Discard removes every message want chooses: a whole slot at once when
// want chooses every message of it (whole), else inquiry by inquiry; a
// slot that holds none of them costs nothing (one scan finds what
// there is). copies, if not "", removes that move's copies alone, message
// by message (the destination's side).
func (j *Ledger) Discard(ctx context.Context, slots []int, want MoveFilter, whole func(slot int) bool, copies string) error {
	var subjects []string // purged one by one
	seen := map[string]bool{}
	add := func(subject string) {
		if !seen[subject] {
			seen[subject] = true
			subjects = append(subjects, subject)
		}
	}
	err := j.scan(ctx, 0, slots, 0, func(m jetstream.Msg, _ *jetstream.MsgMetadata, slot int, rec moveRecord) error {
		switch {
		case !want(slot, rec.UserID) || !movedIn(m, copies):
		case copies != "":
			add(m.Subject())
		case whole(slot) && slot != api.NoSlot:
			add(slotSubjects(j.cell, slot))
		default:
			add(inquirySubjects(j.cell, rec.ID))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, subject := range subjects {
		if err := j.stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			return fmt.Errorf("discard %s: %w", subject, err)
		}
	}
	return nil
}

// Hand hands inquiry id, pending, to another cell under job (one no
// message of this ledger carries): its work here is stale from now on,
// and a write over the revision read before fails. A record no longer
// pending is not handed (it is done or failed here, and moves so);
// handed reports whether it was.
func (j *Ledger) Hand(ctx context.Context, id, job string) (handed bool, err error) {
	for {
		rec, rev, err := j.Get(ctx, id)
		if err != nil {
			return false, err
		}
		if rec.Status != inquiry.Pending {
			return false, nil
		}
		if rec.Job == job {
			return true, nil
		}
		rec.Job = job
		_, err = j.write(ctx, KindHand, &rec, rev)
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, ErrConflict):
			return false, err
		}
	}
}

// HandAll hands every pending inquiry want chooses in slots over (see
// Hand), and returns how many it handed.
func (j *Ledger) HandAll(ctx context.Context, slots []int, want MoveFilter, job string) (int, error) {
	seen := map[string]bool{}
	var ids []string
	err := j.scan(ctx, 0, slots, 0, func(m jetstream.Msg, _ *jetstream.MsgMetadata, slot int, rec moveRecord) error {
		if kind, _, _ := subjectKind(m.Subject()); (kind == KindNew || kind == KindRec || kind == KindHand) && want(slot, rec.UserID) && !seen[rec.ID] {
			seen[rec.ID] = true
			ids = append(ids, rec.ID)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		handed, err := j.Hand(ctx, id, job)
		if err != nil {
			return n, err
		}
		if handed {
			n++
		}
	}
	return n, nil
}

// Activate makes the inquiries handed over in move, in slots and chosen
// by want, this cell's work: each of move's hand messages becomes a "new"
// one under a fresh job (its attempts and scores kept), over the hand's
// revision; one already made work is left as it is. Another move's hand
// messages are left alone. It returns how many it made work.
func (j *Ledger) Activate(ctx context.Context, slots []int, want MoveFilter, move string, now time.Time) (int, error) {
	var hands []string
	err := j.scan(ctx, 0, slots, 0, func(m jetstream.Msg, _ *jetstream.MsgMetadata, slot int, rec moveRecord) error {
		if kind, _, _ := subjectKind(m.Subject()); kind == KindHand && rec.Job == HandJob(move) && want(slot, rec.UserID) {
			hands = append(hands, rec.ID)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range hands {
		rec, rev, err := j.Get(ctx, id)
		if err != nil {
			return n, err
		}
		if rec.Status == inquiry.Pending && rec.Job == HandJob(move) {
			rec.Job, rec.Updated = inquiry.NewJob(), now.UTC() // its attempts and scores kept
			if _, err := j.write(ctx, KindNew, &rec, rev); err != nil && !errors.Is(err, ErrConflict) {
				return n, err
			} else if err == nil {
				n++
			}
		}
		// Its "new" message is its acceptance now: the "hold" copied
		// before the hand-over goes (a later move would carry both as
		// "hold", one over the other), then the hand, which a re-run
		// would look for.
		for _, kind := range []string{KindHold, KindHand} {
			if err := j.stream.Purge(ctx, jetstream.WithPurgeSubject(LedgerSubject(j.cell, kind, rec.Priority, id))); err != nil {
				return n, fmt.Errorf("activate inquiry %s: %w", id, err)
			}
		}
	}
	return n, nil
}

// handJobPrefix starts the job of a handed inquiry (HandJob).
const handJobPrefix = "moved-"

// HandJob is the job an inquiry handed over in move is kept under.
func HandJob(move string) string { return handJobPrefix + move }

// moveRecord is what a move reads of a record.
type moveRecord struct {
	ID       string           `json:"id"`
	UserID   string           `json:"user_id"`
	Priority inquiry.Priority `json:"priority"`
	Job      string           `json:"job,omitempty"`
}

// errScanLimit stops a scan at its limit.
var errScanLimit = errors.New("scan limit reached")

// maxSlotFilters is the most slots a scan names as subject filters;
// with more, it reads every message and chooses by slot itself.
const maxSlotFilters = 64

// scan calls fn with each message after sequence after, oldest first, in
// slots (all, when nil), up to limit of them (0: no limit, errScanLimit
// when reached and more is left).
func (j *Ledger) scan(ctx context.Context, after uint64, slots []int, limit int, fn func(jetstream.Msg, *jetstream.MsgMetadata, int, moveRecord) error) error {
	in := map[int]bool{}
	for _, s := range slots {
		in[s] = true
	}
	var filters []string
	if slots != nil && len(slots) <= maxSlotFilters {
		if len(slots) == 0 {
			return nil
		}
		for _, s := range slots {
			filters = append(filters, slotSubjects(j.cell, s))
		}
		// Ids without a slot: their records' users decide.
		filters = append(filters, "cellkit."+j.cell+".ledger.*.*._.*")
	}
	seen := 0
	return Read(ctx, j.stream, after+1, filters, func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
		_, tokens, ok := subjectKind(m.Subject())
		var rec moveRecord
		if !ok || json.Unmarshal(m.Data(), &rec) != nil || rec.ID == "" {
			return nil // no write makes one: not an inquiry's
		}
		slot := tokenSlot(tokens)
		if slots != nil && !in[slot] && slot != api.NoSlot {
			return nil
		}
		if err := fn(m, md, slot, rec); err != nil {
			return err
		}
		if seen++; limit > 0 && seen >= limit && md.NumPending > 0 {
			return errScanLimit
		}
		return nil
	})
}

// slotSubjects is the filter of every message of slot.
func slotSubjects(cell string, slot int) string {
	return "cellkit." + cell + ".ledger.*.*." + string(api.AppendIDSlot(nil, slot)) + ".*"
}

// subjectKind splits a ledger subject into its kind and its last two
// tokens (slot and unique part).
func subjectKind(subject string) (kind, tokens string, ok bool) {
	i := strings.Index(subject, ".ledger.")
	if i < 0 {
		return "", "", false
	}
	parts := strings.SplitN(subject[i+len(".ledger."):], ".", 3)
	if len(parts) != 3 {
		return "", "", false
	}
	return parts[0], parts[2], true
}

// tokenSlot is the slot of a subject's last two tokens (api.NoSlot for
// "_").
func tokenSlot(tokens string) int {
	dot := strings.IndexByte(tokens, '.')
	if dot != api.IDSlotLen {
		return api.NoSlot
	}
	_, slot, _, ok := api.ParseInquiryID("x-" + tokens[:dot] + tokens[dot+1:])
	if !ok {
		return api.NoSlot
	}
	return slot
}

// writtenAt is when a message was first written: its header's time when a
// move carried it here, else its own.
func writtenAt(m jetstream.Msg, md *jetstream.MsgMetadata) time.Time {
	if v := m.Headers().Get(headerWritten); v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t
		}
	}
	return md.Timestamp
}
