package console_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/console"
	"github.com/cellkit/cellkit/internal/consultest"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestOnConsul: the console reads a Consul registry as it reads a file —
// the map, its history, the rollout's record and the routers' announcements
// — and a Consul agent that stops is a registry that cannot be read, the
// last map kept.
func TestOnConsul(t *testing.T) {
	agent := consultest.Start(t)
	reg, err := registry.Open(registry.Config{URL: "consul://" + agent.Addr() + "/console"}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	ctx := testkit.Context(t, time.Minute)
	ctl := control.New(reg, control.Config{Holder: "console test"}, control.Options{})
	fresh, err := slotmap.New(0, map[string]int{"nice": 80})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Init(ctx, control.InitChange{Map: fresh}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2"} {
		if _, err := ctl.Apply(ctx, control.Change{Plan: control.Provision(celltest.TestCell(id))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ctl.StartRollout(ctx, control.Rollout{ID: "r1", Release: "devel@0123456789ab", Waves: []control.Wave{{Cells: []string{"c1"}, Bake: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	if err := reg.(registry.Announcer).Announce(ctx, registry.Announcement{ID: "router-a", Admin: "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	con, err := console.New(console.Config{Token: token, CallTimeout: time.Second, TrustedAdmin: []string{"http://127.0.0.1:1"}},
		console.Options{Registry: reg, Admin: adminclient.Client{HTTP: &http.Client{}}, Routers: console.AnnouncedRouters(reg)})
	if err != nil {
		t.Fatal(err)
	}
	v := con.Collect(ctx)
	if !v.Registry.OK || v.Map == nil || v.Map.Version != 3 || len(v.Cells) != 2 || v.Rollout == nil || v.Rollout.ID != "r1" ||
		len(v.Routers) != 1 || v.Routers[0].ID != "router-a" || v.Routers[0].Health != console.HealthDown {
		t.Fatalf("on Consul: registry %+v, map %+v, cells %d, rollout %+v, routers %+v", v.Registry, v.Map, len(v.Cells), v.Rollout, v.Routers)
	}
	srv := httptest.NewServer(con.Handler())
	t.Cleanup(srv.Close)
	resp, body := get(t, srv, "/api/history", "Authorization", "Bearer "+token)
	if resp.StatusCode != 200 || !strings.Contains(body, `"version":3`) || !strings.Contains(body, `"version":2`) {
		t.Errorf("history on Consul: %d %.300s", resp.StatusCode, body)
	}

	agent.Stop(t)
	gone := con.Collect(ctx)
	if gone.Registry.OK || gone.Registry.Error == "" || gone.Map == nil || gone.Map.Version != 3 || len(gone.Cells) != 2 {
		t.Errorf("Consul stopped: registry %+v, map %+v", gone.Registry, gone.Map)
	}
}
