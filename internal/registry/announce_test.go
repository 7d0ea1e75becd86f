package registry

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/consultest"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestAnnouncements(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "map.json")
		testAnnouncer(t, func(now func() time.Time) Announcer {
			f, err := NewFile(FileConfig{Path: path}, Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			return f
		})
	})
	t.Run("consul", func(t *testing.T) {
		agent := consultest.Start(t)
		prefix := consulPrefix()
		testAnnouncer(t, func(now func() time.Time) Announcer {
			c, err := NewConsul(consulTestConfig(agent.Addr(), prefix), Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		})
	})
}

// testAnnouncer: routers are listed while their announcement is younger
// than AnnounceTTL, renewing it keeps them, withdrawing removes them, and a
// malformed one is refused.
func testAnnouncer(t *testing.T, open func(now func() time.Time) Announcer) {
	ctx := testkit.Context(t, time.Minute)
	clk := testkit.NewClock(time.Now())
	r := open(clk.Now)
	if as, err := r.Routers(ctx); err != nil || len(as) != 0 {
		t.Fatalf("no announcement yet: %v, %v", as, err)
	}
	for _, a := range []Announcement{{ID: "router-b", Admin: "http://10.0.0.2:9080"}, {ID: "router-a", Admin: "https://10.0.0.1:9080"}} {
		if err := r.Announce(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	as, err := r.Routers(ctx)
	if err != nil || len(as) != 2 || as[0].ID != "router-a" || as[0].Admin != "https://10.0.0.1:9080" || !as[0].At.Equal(clk.Now().UTC()) {
		t.Fatalf("Routers = %+v, %v; want both, by id, stamped now", as, err)
	}
	// router-a renews, router-b does not: it lapses after AnnounceTTL.
	clk.Advance(AnnounceTTL / 2)
	if err := r.Announce(ctx, Announcement{ID: "router-a", Admin: "https://10.0.0.1:9080"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(AnnounceTTL/2 + time.Second)
	if as, err := r.Routers(ctx); err != nil || len(as) != 1 || as[0].ID != "router-a" {
		t.Fatalf("after router-b's announcement lapsed: %+v, %v", as, err)
	}
	if err := r.Withdraw(ctx, "router-a"); err != nil {
		t.Fatal(err)
	}
	if err := r.Withdraw(ctx, "router-a"); err != nil {
		t.Fatalf("withdrawing twice: %v", err)
	}
	if as, err := r.Routers(ctx); err != nil || len(as) != 0 {
		t.Fatalf("after withdraw: %+v, %v", as, err)
	}
	for _, bad := range []Announcement{{ID: "", Admin: "http://x:1"}, {ID: "a/b", Admin: "http://x:1"}, {ID: "ok", Admin: "x:1"}} {
		if err := r.Announce(ctx, bad); err == nil {
			t.Errorf("Announce(%+v) accepted", bad)
		}
	}
}

// TestAnnounceLoopWithdrawsAtTheEnd: the loop announces at once and
// withdraws when its context ends.
func TestAnnounceLoopWithdrawsAtTheEnd(t *testing.T) {
	f, err := NewFile(FileConfig{Path: filepath.Join(t.TempDir(), "map.json")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		AnnounceLoop(ctx, f, Announcement{ID: "r1", Admin: "http://127.0.0.1:9080"}, nil, func(err error) { t.Error(err) })
	}()
	testkit.WaitFor(t, 5*time.Second, "the announcement", func() bool {
		as, _ := f.Routers(context.Background())
		return len(as) == 1
	})
	cancel()
	<-done
	if as, _ := f.Routers(context.Background()); len(as) != 0 {
		t.Fatalf("after the loop ended: %+v", as)
	}
}
