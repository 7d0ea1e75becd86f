package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/cellkit/cellkit/internal/atomicfile"
)

// Routers share each client's quota by leases they publish in the
// registry they follow (internal/quota): one document per router, under
// its id, which the registry keeps without reading it.

// MaxLeaseBytes bounds one router's lease document (Consul's values are at
// most 512 KiB): a larger one is refused on write and skipped on read.
const MaxLeaseBytes = 256 << 10

// LeaseBoard is a registry that keeps routers' quota leases (both
// backends do).
type LeaseBoard interface {
	// PutLease writes the router's document, replacing its last.
	PutLease(ctx context.Context, id string, data []byte) error
	// Leases reads every router's document, by id; one that cannot be
	// read whole is left out.
	Leases(ctx context.Context) (map[string][]byte, error)
	// DropLease removes the router's document; none is no error.
	DropLease(ctx context.Context, id string) error
}

var (
	_ LeaseBoard = (*File)(nil)
	_ LeaseBoard = (*Consul)(nil)
)

func checkLease(id string, data []byte) error {
	if err := checkRouterID(id); err != nil {
		return err
	}
	if len(data) > MaxLeaseBytes {
		return fmt.Errorf("router %s: lease of %d bytes, over %d", id, len(data), MaxLeaseBytes)
	}
	return nil
}

// leasesDir is where a file registry keeps leases: beside the map.
func (f *File) leasesDir() string { return filepath.Join(filepath.Dir(f.path), "leases") }

// PutLease writes DIR/leases/ID.json.
func (f *File) PutLease(_ context.Context, id string, data []byte) error {
	if err := checkLease(id, data); err != nil {
		return err
	}
	if err := os.MkdirAll(f.leasesDir(), 0o755); err != nil {
		return fmt.Errorf("lease of router %s: %w", id, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(f.leasesDir(), id+".json"), data, 0o644); err != nil {
		return fmt.Errorf("lease of router %s: %w", id, err)
	}
	return nil
}

// Leases reads DIR/leases.
func (f *File) Leases(_ context.Context) (map[string][]byte, error) {
	ents, err := os.ReadDir(f.leasesDir())
	if errors.Is(err, os.ErrNotExist) {
		return map[string][]byte{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("leases of %s: %w", f.Describe(), err)
	}
	out := make(map[string][]byte, len(ents))
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || checkRouterID(id) != nil {
			continue
		}
		if data, err := readAtMost(filepath.Join(f.leasesDir(), e.Name()), MaxLeaseBytes); err == nil {
			out[id] = data
		}
	}
	return out, nil
}

// readAtMost reads the file at path if it holds at most n bytes.
func readAtMost(path string, n int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, n+1))
	if err == nil && int64(len(data)) > n {
		err = fmt.Errorf("%s: over %d bytes", path, n)
	}
	return data, err
}

// DropLease removes DIR/leases/ID.json.
func (f *File) DropLease(_ context.Context, id string) error {
	if err := checkRouterID(id); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(f.leasesDir(), id+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("drop the lease of router %s: %w", id, err)
	}
	return nil
}

func (c *Consul) leaseKey(id string) string { return c.prefix + "/leases/" + id }

// PutLease writes PREFIX/leases/ID.
func (c *Consul) PutLease(ctx context.Context, id string, data []byte) error {
	if err := checkLease(id, data); err != nil {
		return err
	}
	if _, err := c.client.KV().Put(&api.KVPair{Key: c.leaseKey(id), Value: data}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("lease of router %s in %s: %w", id, c.Describe(), err)
	}
	return nil
}

// Leases lists PREFIX/leases/.
func (c *Consul) Leases(ctx context.Context) (map[string][]byte, error) {
	pairs, _, err := c.client.KV().List(c.prefix+"/leases/", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("leases of %s: %w", c.Describe(), err)
	}
	out := make(map[string][]byte, len(pairs))
	for _, p := range pairs {
		id := strings.TrimPrefix(p.Key, c.prefix+"/leases/")
		if checkLease(id, p.Value) == nil {
			out[id] = p.Value
		}
	}
	return out, nil
}

// DropLease deletes PREFIX/leases/ID.
func (c *Consul) DropLease(ctx context.Context, id string) error {
	if err := checkRouterID(id); err != nil {
		return err
	}
	if _, err := c.client.KV().Delete(c.leaseKey(id), (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("drop the lease of router %s from %s: %w", id, c.Describe(), err)
	}
	return nil
}
