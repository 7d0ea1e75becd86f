package control

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// HistoryKeep is how many map versions the history keeps.
const HistoryKeep = 50

// ErrNotInHistory means the history has no copy of a version.
var ErrNotInHistory = errors.New("not in the history")

// History keeps copies of the map versions committed, next to the
// registry (the registry itself holds only the newest), so that a diff or
// a show of an older version can look back. Versions written by other
// tools are kept when a change is next planned against them.
type History interface {
	Save(ctx context.Context, m *slotmap.Map) error
	Load(ctx context.Context, version int64) (*slotmap.Map, error)
	Versions(ctx context.Context) ([]int64, error)
	Describe() string
}

// HistoryFor returns the history that belongs to reg, or nil when its kind
// of registry has none.
func HistoryFor(reg registry.Registry) History {
	b, ok := registry.BesideOf(reg)
	switch {
	case !ok:
		return nil
	case b.KV == nil:
		return fileHistory{dir: b.Path + ".history"}
	}
	return consulHistory{kv: b.KV, prefix: b.Prefix + "/history/", where: b.Where}
}

func versionName(v int64) string { return fmt.Sprintf("%010d", v) }

// fileHistory keeps one file per version in PATH.history/.
type fileHistory struct{ dir string }

func (h fileHistory) Describe() string { return h.dir }

func (h fileHistory) Save(_ context.Context, m *slotmap.Map) error {
	path := filepath.Join(h.dir, versionName(m.Version())+".json")
	if _, err := os.Stat(path); err == nil {
		return nil // a version's copy never changes
	}
	data, err := m.Encode()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	vs, err := h.Versions(context.Background())
	if err != nil {
		return err
	}
	for _, v := range vs[:max(0, len(vs)-HistoryKeep)] {
		_ = os.Remove(filepath.Join(h.dir, versionName(v)+".json"))
	}
	return nil
}

func (h fileHistory) Load(_ context.Context, v int64) (*slotmap.Map, error) {
	data, err := os.ReadFile(filepath.Join(h.dir, versionName(v)+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotInHistory
	}
	if err != nil {
		return nil, err
	}
	return slotmap.Decode(data)
}

func (h fileHistory) Versions(context.Context) ([]int64, error) {
	entries, err := os.ReadDir(h.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var vs []int64
	for _, e := range entries {
		if v, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".json"), 10, 64); err == nil && strings.HasSuffix(e.Name(), ".json") {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

// consulHistory keeps one key per version under PREFIX/history/.
type consulHistory struct {
	kv     *api.KV
	prefix string
	where  string
}

func (h consulHistory) Describe() string { return h.where + " (keys " + h.prefix + ")" }

func (h consulHistory) Save(ctx context.Context, m *slotmap.Map) error {
	data, err := m.Encode()
	if err != nil {
		return err
	}
	// CAS with index 0: create only, a version's copy never changes.
	if _, _, err := h.kv.CAS(&api.KVPair{Key: h.prefix + versionName(m.Version()), Value: data},
		(&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return err
	}
	vs, err := h.Versions(ctx)
	if err != nil {
		return err
	}
	for _, v := range vs[:max(0, len(vs)-HistoryKeep)] {
		if _, err := h.kv.Delete(h.prefix+versionName(v), (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			return err
		}
	}
	return nil
}

func (h consulHistory) Load(ctx context.Context, v int64) (*slotmap.Map, error) {
	pair, _, err := h.kv.Get(h.prefix+versionName(v), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if pair == nil {
		return nil, ErrNotInHistory
	}
	return slotmap.Decode(pair.Value)
}

func (h consulHistory) Versions(ctx context.Context) ([]int64, error) {
	keys, _, err := h.kv.Keys(h.prefix, "/", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	var vs []int64
	for _, k := range keys {
		if v, err := strconv.ParseInt(strings.TrimPrefix(k, h.prefix), 10, 64); err == nil {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}
