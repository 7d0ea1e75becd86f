package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	names "github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/atomicfile"
)

// Routers announce themselves in the registry they follow, so that cellctl
// finds every router (their per-slot traffic, their hot users) without a
// list kept by hand. An announcement lasts AnnounceTTL: a router renews it
// every AnnounceEvery and withdraws it when it stops; one that dies simply
// lapses.
const (
	AnnounceTTL   = 30 * time.Second
	AnnounceEvery = 10 * time.Second
)

// Announcement is one router's entry.
type Announcement struct {
	// ID names the router: 1–64 of [A-Za-z0-9._-] (its host name, say).
	ID string `json:"id"`
	// Admin is the base URL of its admin API.
	Admin string `json:"admin"`
	// At is when it was last announced.
	At time.Time `json:"at"`
}

// Announcer is a registry that keeps routers' announcements (both backends
// do).
type Announcer interface {
	// Announce records a (or renews it), stamping At.
	Announce(ctx context.Context, a Announcement) error
	// Withdraw removes the router's announcement; none is no error.
	Withdraw(ctx context.Context, id string) error
	// Routers lists the announcements younger than AnnounceTTL, by id.
	Routers(ctx context.Context) ([]Announcement, error)
}

var (
	_ Announcer = (*File)(nil)
	_ Announcer = (*Consul)(nil)
)

func checkAnnouncement(a Announcement) error {
	if err := checkRouterID(a.ID); err != nil {
		return err
	}
	if !strings.HasPrefix(a.Admin, "http://") && !strings.HasPrefix(a.Admin, "https://") {
		return fmt.Errorf("router %s: admin URL %q: want http(s)://HOST:PORT", a.ID, a.Admin)
	}
	return nil
}

// encodeAnnouncement checks a, stamps it at now and encodes it.
func encodeAnnouncement(a Announcement, now time.Time) ([]byte, error) {
	if err := checkAnnouncement(a); err != nil {
		return nil, err
	}
	a.At = now.UTC()
	return json.Marshal(a)
}

// decodeAnnouncement reads a stored announcement; false for one that is
// not well formed.
func decodeAnnouncement(data []byte) (Announcement, bool) {
	var a Announcement
	return a, json.Unmarshal(data, &a) == nil && checkAnnouncement(a) == nil
}

func checkRouterID(id string) error {
	if !names.ValidClientID(id) {
		return fmt.Errorf("router id %q: want 1-64 of [A-Za-z0-9._-]", id)
	}
	return nil
}

// live keeps the announcements younger than AnnounceTTL at now, by id.
func live(as []Announcement, now time.Time) []Announcement {
	out := as[:0]
	for _, a := range as {
		if now.Sub(a.At) < AnnounceTTL {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b Announcement) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// routersDir is where a file registry keeps announcements: beside the map.
func (f *File) routersDir() string { return filepath.Join(filepath.Dir(f.path), "routers") }

// Announce writes DIR/routers/ID.json.
func (f *File) Announce(_ context.Context, a Announcement) error {
	data, err := encodeAnnouncement(a, f.opts.now())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.routersDir(), 0o755); err != nil {
		return fmt.Errorf("announce router %s: %w", a.ID, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(f.routersDir(), a.ID+".json"), data, 0o644); err != nil {
		return fmt.Errorf("announce router %s: %w", a.ID, err)
	}
	return nil
}

// Withdraw removes DIR/routers/ID.json.
func (f *File) Withdraw(_ context.Context, id string) error {
	if err := checkRouterID(id); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(f.routersDir(), id+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("withdraw router %s: %w", id, err)
	}
	return nil
}

// Routers reads DIR/routers; an entry it cannot read is left out.
func (f *File) Routers(_ context.Context) ([]Announcement, error) {
	ents, err := os.ReadDir(f.routersDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("routers of %s: %w", f.Describe(), err)
	}
	var as []Announcement
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(f.routersDir(), e.Name()))
		if a, ok := decodeAnnouncement(data); err == nil && ok {
			as = append(as, a)
		}
	}
	return live(as, f.opts.now()), nil
}

func (c *Consul) routerKey(id string) string { return c.prefix + "/routers/" + id }

// Announce writes PREFIX/routers/ID.
func (c *Consul) Announce(ctx context.Context, a Announcement) error {
	data, err := encodeAnnouncement(a, c.opts.now())
	if err != nil {
		return err
	}
	if _, err := c.client.KV().Put(&api.KVPair{Key: c.routerKey(a.ID), Value: data}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("announce router %s in %s: %w", a.ID, c.Describe(), err)
	}
	return nil
}

// Withdraw deletes PREFIX/routers/ID.
func (c *Consul) Withdraw(ctx context.Context, id string) error {
	if err := checkRouterID(id); err != nil {
		return err
	}
	if _, err := c.client.KV().Delete(c.routerKey(id), (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("withdraw router %s from %s: %w", id, c.Describe(), err)
	}
	return nil
}

// Routers lists PREFIX/routers/.
func (c *Consul) Routers(ctx context.Context) ([]Announcement, error) {
	pairs, _, err := c.client.KV().List(c.prefix+"/routers/", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("routers of %s: %w", c.Describe(), err)
	}
	var as []Announcement
	for _, p := range pairs {
		if a, ok := decodeAnnouncement(p.Value); ok {
			as = append(as, a)
		}
	}
	return live(as, c.opts.now()), nil
}

// AnnounceLoop announces a until ctx ends, every AnnounceEvery (a failure is
// passed to onErr and tried again at the next tick), then withdraws it
// unless withdraw (nil: always) says not to: a router that handed its
// sockets to a successor leaves the announcement, which is the
// successor's too (the same id and admin address).
func AnnounceLoop(ctx context.Context, reg Announcer, a Announcement, withdraw func() bool, onErr func(error)) {
	t := time.NewTicker(AnnounceEvery)
	defer t.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := reg.Announce(actx, a); err != nil && ctx.Err() == nil && onErr != nil {
			onErr(err)
		}
		cancel()
		select {
		case <-ctx.Done():
			if withdraw != nil && !withdraw() {
				return
			}
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := reg.Withdraw(wctx, a.ID); err != nil && onErr != nil {
				onErr(err)
			}
			cancel()
			return
		case <-t.C:
		}
	}
}
