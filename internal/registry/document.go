package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/cellkit/cellkit/internal/atomicfile"
)

// ErrNoDocument means a document beside the registry has not been written.
var ErrNoDocument = errors.New("no such document")

// ErrDocumentChanged means a document was written by someone else since
// it was read: a compare-and-swap lost.
var ErrDocumentChanged = errors.New("the document changed since it was read")

// Document is one JSON document kept beside the registry's map (a
// rollout's record), with compare-and-swap: Put writes only over the
// revision read. Writers also hold the registry's writer lock; the
// revision guards against one that does not.
type Document interface {
	// Get returns the document and its revision, or ErrNoDocument.
	Get(ctx context.Context) (data []byte, rev uint64, err error)
	// Put writes data if the stored revision is still rev (0: none yet),
	// else ErrDocumentChanged.
	Put(ctx context.Context, data []byte, rev uint64) error
	// Delete removes the document if its revision is still rev.
	Delete(ctx context.Context, rev uint64) error
	Describe() string
}

// DocumentFor returns the document name beside reg's map: the file
// PATH.NAME beside a file registry's PATH, the key PREFIX/NAME in Consul.
// Nil when reg's kind keeps none.
func DocumentFor(reg Registry, name string) Document {
	b, ok := BesideOf(reg)
	switch {
	case !ok:
		return nil
	case b.KV == nil:
		return fileDocument{path: b.Path + "." + name}
	}
	return consulDocument{kv: b.KV, key: b.Prefix + "/" + name, where: b.Where}
}

// Beside is where a registry keeps what lives beside its map (the map's
// history, documents): next to a file registry's PATH, or under a Consul
// registry's key prefix through its own client.
type Beside struct {
	Path   string  // a file registry's map file
	KV     *api.KV // a Consul registry's (with its ACL token: the registry's configuration, or the environment's)
	Prefix string  // a Consul registry's key prefix
	Where  string  // the registry's description
}

// BesideOf says where reg keeps what lives beside its map; false for a
// kind of registry that keeps nothing there.
func BesideOf(reg Registry) (Beside, bool) {
	desc := reg.Describe()
	switch {
	case strings.HasPrefix(desc, "file:"):
		return Beside{Path: strings.TrimPrefix(desc, "file:"), Where: desc}, true
	case strings.HasPrefix(desc, "consul://"):
		u, err := url.Parse(desc)
		if err != nil {
			return Beside{}, false
		}
		kvr, ok := reg.(interface{ KV() *api.KV })
		if !ok {
			return Beside{}, false
		}
		return Beside{KV: kvr.KV(), Prefix: strings.Trim(u.Path, "/"), Where: desc}, true
	}
	return Beside{}, false
}

// fileDocument is a file holding {"rev": N, "doc": ...}.
type fileDocument struct{ path string }

type fileEnvelope struct {
	Rev uint64          `json:"rev"`
	Doc json.RawMessage `json:"doc"`
}

func (d fileDocument) Describe() string { return d.path }

func (d fileDocument) Get(context.Context) ([]byte, uint64, error) {
	b, err := os.ReadFile(d.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, ErrNoDocument
	}
	if err != nil {
		return nil, 0, err
	}
	var e fileEnvelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", d.path, err)
	}
	return e.Doc, e.Rev, nil
}

func (d fileDocument) current() (uint64, error) {
	_, rev, err := d.Get(context.Background())
	if errors.Is(err, ErrNoDocument) {
		return 0, nil
	}
	return rev, err
}

func (d fileDocument) Put(_ context.Context, data []byte, rev uint64) error {
	cur, err := d.current()
	if err != nil {
		return err
	}
	if cur != rev {
		return ErrDocumentChanged
	}
	b, err := json.Marshal(fileEnvelope{Rev: rev + 1, Doc: data})
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(d.path, append(b, '\n'), 0o600)
}

func (d fileDocument) Delete(_ context.Context, rev uint64) error {
	cur, err := d.current()
	if err != nil {
		return err
	}
	if cur != rev {
		return ErrDocumentChanged
	}
	if err := os.Remove(d.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// consulDocument is one key; its revision is Consul's ModifyIndex.
type consulDocument struct {
	kv    *api.KV
	key   string
	where string
}

func (d consulDocument) Describe() string { return d.where + " (key " + d.key + ")" }

func (d consulDocument) Get(ctx context.Context) ([]byte, uint64, error) {
	pair, _, err := d.kv.Get(d.key, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, 0, err
	}
	if pair == nil {
		return nil, 0, ErrNoDocument
	}
	return pair.Value, pair.ModifyIndex, nil
}

func (d consulDocument) Put(ctx context.Context, data []byte, rev uint64) error {
	ok, _, err := d.kv.CAS(&api.KVPair{Key: d.key, Value: data, ModifyIndex: rev}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return err
	}
	if !ok {
		return ErrDocumentChanged
	}
	return nil
}

func (d consulDocument) Delete(ctx context.Context, rev uint64) error {
	ok, _, err := d.kv.DeleteCAS(&api.KVPair{Key: d.key, ModifyIndex: rev}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return err
	}
	if !ok {
		return ErrDocumentChanged
	}
	return nil
}
