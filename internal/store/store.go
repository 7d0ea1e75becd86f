// Package store keeps a cell's inquiry records in a JetStream key-value
// bucket, one key per inquiry id.
//
// Every write is a compare-and-swap on the key's revision (Create only if
// absent, Update and Delete only at the revision read), so that the intake,
// a worker and a redelivered copy of a message can never overwrite each
// other's decision: the loser gets ErrConflict, re-reads and decides again.
// Records expire TTL after their last write.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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

// DefaultTTL is how long records are kept after their last write.
const DefaultTTL = 7 * 24 * time.Hour

// Bucket is the name of a cell's record bucket.
func Bucket(cell string) string { return "cellkit-" + cell + "-inquiries" }

// Store is a cell's record bucket. It is safe for concurrent use.
type Store struct {
	kv jetstream.KeyValue
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
	return &Store{kv: kv}, nil
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
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return r, 0, ErrNotFound
	}
	if err != nil {
		return r, 0, fmt.Errorf("read record %s: %w", id, err)
	}
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return r, 0, fmt.Errorf("decode record %s: %w", id, err)
	}
	return r, e.Revision(), nil
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
