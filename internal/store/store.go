// Package store keeps a cell's inquiries on JetStream: in its ledger, one
// stream of each inquiry's acceptance and later states (ledger.go), and
// in the layout before it, a key-value bucket of records, one key per
// inquiry id (Store).
//
// Every write is a compare-and-swap on the key's revision (Create only if
// absent, Update and Delete only at the revision read), so that the intake,
// a worker and a redelivered copy of a message can never overwrite each
// other's decision: the loser gets ErrConflict, re-reads and decides again.
// Records expire TTL after their last write.
//
// Reads of a replicated bucket go to the stream's leader. A key-value
// bucket answers reads from any replica by default (direct gets), and a
// replica that has not yet applied a write answers as if it were not
// there: a worker that read "no such record" for an inquiry just accepted
// would drop its work as stale, and the inquiry would stay pending
// forever. The leader has applied every write it acknowledged.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/inquiry"
)

var (
	// ErrNotFound means no record has that id (or it was rolled back).
	ErrNotFound = errors.New("inquiry not found")
	// ErrExists means Create found a record already there.
	ErrExists = errors.New("inquiry already exists")
	// ErrConflict means the record changed since it was read.
	ErrConflict = errors.New("inquiry record changed concurrently")
)

// Refused reports whether err, the failure of a write to JetStream (a
// record's or a stream message's), says that the write was surely not
// made: the server answered and refused it (an API error, a
// compare-and-swap that failed), or no server received it (no
// responders). Any other failure leaves the write's outcome unknown: an
// answer that never came (a timeout, a connection lost or a wait cut
// short after the request went out) may follow a write the server made,
// or will still make.
func Refused(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) || errors.Is(err, ErrExists) || errors.Is(err, ErrConflict) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// DefaultTTL is how long records are kept after their last write.
const DefaultTTL = 7 * 24 * time.Hour

// Bucket is the name of a cell's record bucket.
func Bucket(cell string) string { return "cellkit-" + cell + "-inquiries" }

// Store is a cell's record bucket. It is safe for concurrent use.
type Store struct {
	kv jetstream.KeyValue
	// nc and bucket, for a replicated bucket: reads go to its leader.
	nc     *nats.Conn
	bucket string
}

// Open creates or updates the bucket of cell with the given TTL (0: 7
// days), in file storage with one replica.
func Open(ctx context.Context, js jetstream.JetStream, cell string, ttl time.Duration) (*Store, error) {
	return OpenReplicated(ctx, js, cell, ttl, 1)
}

// OpenReplicated is Open with the bucket kept on replicas nodes of a
// JetStream cluster (3 in production: a record survives losing a node).
func OpenReplicated(ctx context.Context, js jetstream.JetStream, cell string, ttl time.Duration, replicas int) (*Store, error) {
	if replicas <= 0 {
		replicas = 1
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket(cell),
		Description: "inquiry records of cell " + cell,
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("open record bucket %s: %w", Bucket(cell), err)
	}
	st := &Store{kv: kv}
	if replicas > 1 {
		st.nc, st.bucket = js.Conn(), Bucket(cell)
	}
	return st, nil
}

// Create stores a new record; ErrExists if one is there.
func (s *Store) Create(ctx context.Context, r *inquiry.Record) (uint64, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	rev, err := s.kv.Create(ctx, r.ID, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, ErrExists
	}
	if err != nil {
		return 0, fmt.Errorf("create record %s: %w", r.ID, err)
	}
	return rev, nil
}

// Get reads a record and its revision.
func (s *Store) Get(ctx context.Context, id string) (inquiry.Record, uint64, error) {
	var r inquiry.Record
	var value []byte
	var rev uint64
	var err error
	if s.nc != nil {
		value, rev, err = s.leaderGet(ctx, id)
	} else {
		var e jetstream.KeyValueEntry
		if e, err = s.kv.Get(ctx, id); err == nil {
			value, rev = e.Value(), e.Revision()
		}
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return r, 0, ErrNotFound
	}
	if err != nil {
		return r, 0, fmt.Errorf("read record %s: %w", id, err)
	}
	if err := json.Unmarshal(value, &r); err != nil {
		return r, 0, fmt.Errorf("decode record %s: %w", id, err)
	}
	return r, rev, nil
}

// leaderGet reads key's last value through the stream's leader (the
// STREAM.MSG.GET API, which only the leader answers).
func (s *Store) leaderGet(ctx context.Context, key string) ([]byte, uint64, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + s.bucket + "." + key})
	if err != nil {
		return nil, 0, err
	}
	msg, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+s.bucket, req)
	if err != nil {
		return nil, 0, err
	}
	return leaderAnswer(msg.Data)
}

// leaderAnswer decodes the leader's answer to a STREAM.MSG.GET: the
// message's data and sequence, or the API's error as the library's
// *jetstream.APIError.
func leaderAnswer(data []byte) ([]byte, uint64, error) {
	var resp struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
		// The library's own type, so that callers see the API's codes
		// (errors.As): "temporarily unavailable" in an election is a
		// reason to wait for the leader, not a failure.
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, 0, fmt.Errorf("decode the leader's answer: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, 0, jetstream.ErrKeyNotFound
	case resp.Error != nil:
		return nil, 0, resp.Error
	case resp.Message == nil:
		return nil, 0, errors.New("empty answer from the leader")
	}
	if len(resp.Message.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Hdrs)
		if err != nil {
			return nil, 0, fmt.Errorf("decode the record's headers: %w", err)
		}
		if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			return nil, 0, jetstream.ErrKeyDeleted
		}
	}
	return resp.Message.Data, resp.Message.Seq, nil
}

// Update replaces the record if it is still at rev; ErrConflict if not.
func (s *Store) Update(ctx context.Context, r *inquiry.Record, rev uint64) (uint64, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	n, err := s.kv.Update(ctx, r.ID, data, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("update record %s: %w", r.ID, err)
	}
	return n, nil
}

// Delete removes the record if it is still at rev; ErrConflict if not.
func (s *Store) Delete(ctx context.Context, id string, rev uint64) error {
	err := s.kv.Delete(ctx, id, jetstream.LastRevision(rev))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return ErrConflict
	}
	if err != nil {
		return fmt.Errorf("delete record %s: %w", id, err)
	}
	return nil
}
