package cellctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
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

// historyKeep is how many map versions the history keeps.
const historyKeep = 50

// errNotInHistory means the history has no copy of a version.
var errNotInHistory = errors.New("not in the history")

// history keeps copies of the map versions cellctl committed, next to the
// registry (the registry itself holds only the newest), so that 'map diff
// VERSION' and 'map show --version' can look back. Versions written by other
// tools are kept when cellctl next plans against them.
type history interface {
	save(ctx context.Context, m *slotmap.Map) error
	load(ctx context.Context, version int64) (*slotmap.Map, error)
	versions(ctx context.Context) ([]int64, error)
	describe() string
}

// historyFor returns the history that belongs to reg, or nil when its kind
// of registry has none.
func historyFor(reg registry.Registry) history {
	desc := reg.Describe()
	switch {
	case strings.HasPrefix(desc, "file:"):
		return fileHistory{dir: strings.TrimPrefix(desc, "file:") + ".history"}
	case strings.HasPrefix(desc, "consul://"):
		u, err := url.Parse(desc)
		if err != nil {
			return nil
		}
		cfg := api.DefaultConfig()
		cfg.Address = u.Host
		client, err := api.NewClient(cfg)
		if err != nil {
			return nil
		}
		return consulHistory{kv: client.KV(), prefix: strings.Trim(u.Path, "/") + "/history/", where: desc}
	}
	return nil
}

func versionName(v int64) string { return fmt.Sprintf("%010d", v) }

// fileHistory keeps one file per version in PATH.history/.
type fileHistory struct{ dir string }

func (h fileHistory) describe() string { return h.dir }

func (h fileHistory) save(_ context.Context, m *slotmap.Map) error {
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
	vs, err := h.versions(context.Background())
	if err != nil {
		return err
	}
	for _, v := range vs[:max(0, len(vs)-historyKeep)] {
		_ = os.Remove(filepath.Join(h.dir, versionName(v)+".json"))
	}
	return nil
}

func (h fileHistory) load(_ context.Context, v int64) (*slotmap.Map, error) {
	data, err := os.ReadFile(filepath.Join(h.dir, versionName(v)+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNotInHistory
	}
	if err != nil {
		return nil, err
	}
	return slotmap.Decode(data)
}

func (h fileHistory) versions(context.Context) ([]int64, error) {
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

func (h consulHistory) describe() string { return h.where + " (keys " + h.prefix + ")" }

func (h consulHistory) save(ctx context.Context, m *slotmap.Map) error {
	data, err := m.Encode()
	if err != nil {
		return err
	}
	// CAS with index 0: create only, a version's copy never changes.
	if _, _, err := h.kv.CAS(&api.KVPair{Key: h.prefix + versionName(m.Version()), Value: data},
		(&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return err
	}
	vs, err := h.versions(ctx)
	if err != nil {
		return err
	}
	for _, v := range vs[:max(0, len(vs)-historyKeep)] {
		if _, err := h.kv.Delete(h.prefix+versionName(v), (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			return err
		}
	}
	return nil
}

func (h consulHistory) load(ctx context.Context, v int64) (*slotmap.Map, error) {
	pair, _, err := h.kv.Get(h.prefix+versionName(v), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if pair == nil {
		return nil, errNotInHistory
	}
	return slotmap.Decode(pair.Value)
}

func (h consulHistory) versions(ctx context.Context) ([]int64, error) {
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
