package main

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestRoutersShareAClientsQuota: two routers on one registry hold one
// quota for a client between them: a client at three times its limit,
// its requests spread over both, gets its limit and at most 10 % more,
// and the answers' fields tell of the whole quota.
func TestRoutersShareAClientsQuota(t *testing.T) {
	dir := t.TempDir()
	regPath := filepath.Join(dir, "map.json")
	publishMap(t, regPath, okCell(t).URL)
	keys := filepath.Join(dir, "keys.json")
	key := mustAddKey(t, keys, "platform-a", "--rate", "20", "--burst", "20")
	routers := []*running{startRouterOn(t, regPath, keys, "--id", "r1"), startRouterOn(t, regPath, keys, "--id", "r2")}
	for _, r := range routers {
		testkit.WaitFor(t, 5*time.Second, "each router to count both", func() bool {
			var q api.RouterQuota
			resp := testkit.DoJSON(t, r.adminHTTP, "GET", r.admin+"/v1/admin/quota", nil, &q)
			return resp.Status == http.StatusOK && q.Routers == 2
		})
	}

	// 60 requests a second for 10 s, every other one to each router.
	const rate, secs = 60, 10
	took := map[int]int{}
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for i := range rate * secs {
		<-tick.C
		r := routers[i%2]
		a := testkit.Do(t, r.client, "POST", r.public+"/v1/inquiries", `{"user_id":"u1"}`, map[string]string{"X-API-Key": key})
		if a.Status == http.StatusAccepted {
			took[i%2]++
		}
		limit, _ := strconv.Atoi(a.Header.Get("X-RateLimit-Limit"))
		remaining, err := strconv.Atoi(a.Header.Get("X-RateLimit-Remaining"))
		if limit != 20 || err != nil || remaining > 20 {
			t.Fatalf("request %d: limit %q, remaining %q; want the client's burst 20, and at most that", i, a.Header.Get("X-RateLimit-Limit"), a.Header.Get("X-RateLimit-Remaining"))
		}
		if a.Status == http.StatusTooManyRequests && a.Header.Get("Retry-After") == "" {
			t.Fatalf("request %d: 429 without Retry-After", i)
		}
	}
	got := float64(took[0]+took[1]) / secs
	t.Logf("accepted %.1f/s (r1 %d, r2 %d) of %d/s asked, limit 20/s", got, took[0], took[1], rate)
	if got > 1.1*20 || got < 0.8*20 {
		t.Fatalf("accepted %.1f/s over both routers, want the limit 20/s and at most 10 %% more", got)
	}
	var q api.RouterQuota
	testkit.DoJSON(t, routers[0].adminHTTP, "GET", routers[0].admin+"/v1/admin/quota", nil, &q)
	if len(q.Clients) != 1 || q.Clients[0].Held > 1.05 || q.Clients[0].TotalDemand < 50 {
		b, _ := json.Marshal(q)
		t.Fatalf("/v1/admin/quota: %s, want platform-a held at most once over both, asked about 60/s", b)
	}
}

// Routers on one host name (network namespaces of one machine) get
// distinct default ids from their admin addresses; --id wins; a
// wildcard or loopback admin listener is told apart by its port alone.
func TestDefaultRouterIDsDiffer(t *testing.T) {
	at := func(ip string, port int) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: port} }
	a, b := routerID(options{}, at("10.77.0.4", 9080)), routerID(options{}, at("10.77.0.5", 9080))
	if a == b {
		t.Errorf("routers at 10.77.0.4:9080 and 10.77.0.5:9080 share the id %q", a)
	}
	for _, id := range []string{a, b, routerID(options{}, at("fe80::1", 9080)), routerID(options{}, at("0.0.0.0", 9080))} {
		if !api.ValidClientID(id) { // router ids are client ids' names
			t.Errorf("default id %q is not a valid router id", id)
		}
	}
	if l, w := routerID(options{}, at("127.0.0.1", 9080)), routerID(options{}, at("0.0.0.0", 9080)); l != w || !strings.HasSuffix(l, "-9080") {
		t.Errorf("loopback %q and wildcard %q: want the host name and port alone", l, w)
	}
	if got := routerID(options{id: "edge-1"}, at("10.77.0.4", 9080)); got != "edge-1" {
		t.Errorf("--id edge-1: %q", got)
	}
}
