package console_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/console"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { celltest.VerifyTestMain(m) }

const token = "console-test-token-0123456789abcdef"

// newConsole serves a console on reg's map (cells whose admin APIs do not
// answer unless the test starts them), one view collected. Unless cfg
// says otherwise, it trusts the admin URLs in the map as it is now.
func newConsole(t *testing.T, reg *celltest.Registry, cfg console.Config) (*console.Console, *httptest.Server) {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = token
	}
	if cfg.TrustedAdmin == nil {
		cfg.TrustedAdmin = adminURLs(reg.Map())
	}
	con, err := console.New(cfg, console.Options{Registry: reg.Reg, Admin: adminclient.Client{HTTP: &http.Client{}}})
	if err != nil {
		t.Fatal(err)
	}
	con.Collect(testkit.Context(t, 10*time.Second))
	srv := httptest.NewServer(con.Handler())
	t.Cleanup(srv.Close)
	return con, srv
}

// adminURLs are the admin URLs of m's cells and instances.
func adminURLs(m *slotmap.Map) []string {
	out := []string{}
	for _, c := range m.Cells() {
		out = append(out, c.Admin)
		for _, in := range c.Instances {
			out = append(out, in.Admin)
		}
	}
	return out
}

// get asks the console for path with the headers given as name, value.
func get(t *testing.T, srv *httptest.Server, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func TestNothingWithoutTheToken(t *testing.T) {
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80}, celltest.TestCell("c1"))
	_, srv := newConsole(t, reg, console.Config{})
	for _, tc := range []struct {
		path, auth string
		html       bool
	}{
		{path: "/api/view"}, {path: "/api/map"}, {path: "/api/lookup?q=u-1"}, {path: "/api/history"},
		{path: "/api/events"}, {path: "/api/history/2"},
		{path: "/api/view", auth: "Bearer not-the-token"}, {path: "/api/view", auth: "Basic " + token},
		{path: "/", html: true}, {path: "/?token=wrong", html: true},
	} {
		resp, body := get(t, srv, tc.path, "Authorization", tc.auth)
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "c1") || strings.Contains(body, "nice") {
			t.Errorf("%s (%q): %d %s, want 401 and no data", tc.path, tc.auth, resp.StatusCode, body)
		}
		if resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", tc.path)
		}
		if ct := resp.Header.Get("Content-Type"); tc.html != strings.HasPrefix(ct, "text/html") {
			t.Errorf("%s: Content-Type %s", tc.path, ct)
		}
	}
	// Open: probes and the static assets, which hold no data.
	for _, path := range []string{"/healthz", "/readyz", "/assets/app.js", "/assets/app.css"} {
		if resp, body := get(t, srv, path); resp.StatusCode != http.StatusOK || strings.Contains(body, reg.Path) {
			t.Errorf("%s: %d, want 200 with no data", path, resp.StatusCode)
		}
	}
	if resp, _ := get(t, srv, "/assets/"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/assets/: %d, want 404 (no listing)", resp.StatusCode)
	}
	if _, err := console.New(console.Config{}, console.Options{Registry: reg.Reg, Admin: adminclient.Client{HTTP: &http.Client{}}}); err == nil {
		t.Error("a console with neither a token nor client certificates was made")
	}
}

func TestTheTokenOpensASession(t *testing.T) {
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80}, celltest.TestCell("c1"))
	_, srv := newConsole(t, reg, console.Config{})
	if resp, body := get(t, srv, "/api/view", "Authorization", "Bearer "+token); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"c1"`) {
		t.Fatalf("with the bearer token: %d %s", resp.StatusCode, body)
	}
	resp, _ := get(t, srv, "/?token="+token+"&x=1")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?x=1" {
		t.Fatalf("?token=: %d to %q, want 303 to the page without the token", resp.StatusCode, resp.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		session = c
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Value == token || len(session.Value) < 32 {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, a secret other than the token", session)
	}
	cookie := session.Name + "=" + session.Value
	for _, path := range []string{"/", "/api/view", "/api/map"} {
		if resp, body := get(t, srv, path, "Cookie", cookie); resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("%s with the session: %d", path, resp.StatusCode)
		}
	}
	if resp, _ := get(t, srv, "/api/view", "Cookie", session.Name+"=forged"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a forged session: %d, want 401", resp.StatusCode)
	}
	// Every answer keeps the page to itself.
	resp, _ = get(t, srv, "/", "Cookie", cookie)
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	if resp.Header.Get("Referrer-Policy") != "no-referrer" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v", resp.Header)
	}

	// The sign-in form: bounded, and only the right token.
	post := func(ct, body string) *http.Response {
		resp, err := noRedirect.Post(srv.URL+"/login", ct, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	form := "application/x-www-form-urlencoded"
	for _, tc := range []struct {
		ct, body string
		want     int
	}{
		{form, "token=" + url.QueryEscape(token), http.StatusSeeOther},
		{form, "token=nope", http.StatusUnauthorized},
		{form, "token=" + strings.Repeat("a", 8<<10), http.StatusRequestEntityTooLarge},
		{"application/json", `{"token":"` + token + `"}`, http.StatusUnsupportedMediaType},
	} {
		if resp := post(tc.ct, tc.body); resp.StatusCode != tc.want {
			t.Errorf("POST /login %s (%d bytes): %d, want %d", tc.ct, len(tc.body), resp.StatusCode, tc.want)
		}
	}
	// Paths it does not serve are problems.
	if resp, body := get(t, srv, "/nope", "Cookie", cookie); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "not-found") {
		t.Errorf("/nope: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/api/view", nil)
	if resp, err := noRedirect.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") == "" {
		t.Errorf("DELETE /api/view: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

func TestLookupSaysWhereAndWhy(t *testing.T) {
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80}, celltest.TestCell("c1"), celltest.TestCell("c2"), celltest.TestCell("c3"))
	m := reg.Map()
	route := m.Lookup("u-42")
	other := "c1"
	if route.Cell == "c1" {
		other = "c2"
	}
	reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetOverride("u-pinned", other) })
	reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetOverride("u-idle", "c3") })
	reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.Drain("c3") })
	m = reg.Map()
	_, srv := newConsole(t, reg, console.Config{})
	lookup := func(q string) (int, console.Lookup, string) {
		resp, body := get(t, srv, "/api/lookup?q="+url.QueryEscape(q), "Authorization", "Bearer "+token)
		var l console.Lookup
		_ = json.Unmarshal([]byte(body), &l)
		return resp.StatusCode, l, body
	}
	if code, l, body := lookup("u-42"); code != 200 || l.Cell != m.Lookup("u-42").Cell || l.Slot != m.SlotOf("u-42") || l.Override ||
		!strings.Contains(l.Why, "hashes to slot") {
		t.Errorf("u-42: %d %s", code, body)
	}
	if code, l, body := lookup("u-pinned"); code != 200 || l.Cell != other || !l.Override || !strings.Contains(l.Why, "pinned to "+other) {
		t.Errorf("u-pinned: %d %s", code, body)
	}
	if code, l, body := lookup("u-idle"); code != 200 || l.Override || l.Cell == "c3" || !strings.Contains(l.Why, "not in effect") {
		t.Errorf("u-idle (pinned to a draining cell): %d %s", code, body)
	}
	// The slot table: each slot's owner as the map has it, the overrides
	// with their slots.
	resp, body := get(t, srv, "/api/map", "Authorization", "Bearer "+token)
	var table console.SlotTable
	if err := json.Unmarshal([]byte(body), &table); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/api/map: %d %.200s", resp.StatusCode, body)
	}
	owners, err := base64.StdEncoding.DecodeString(table.Owners)
	if err != nil || len(owners) != 2*m.Slots() || table.Version != m.Version() || table.OverridesTotal != 2 || len(table.Overrides) != 2 {
		t.Fatalf("/api/map: version %d, %d bytes of owners, overrides %+v (%d)", table.Version, len(owners), table.Overrides, table.OverridesTotal)
	}
	for s := range m.Slots() {
		o := int(binary.LittleEndian.Uint16(owners[2*s:]))
		if got := table.Cells[o]; got != m.Owner(s) {
			t.Fatalf("slot %d: the table says %s, the map %s", s, got, m.Owner(s))
		}
	}
	for _, o := range table.Overrides {
		if o.Slot != m.SlotOf(o.User) || m.Overrides()[o.User] != o.Cell {
			t.Errorf("override %+v: the map pins %s to %s in slot %d", o, o.User, m.Overrides()[o.User], m.SlotOf(o.User))
		}
	}

	for _, q := range []string{"7", "slot:7"} {
		if code, l, body := lookup(q); code != 200 || l.Kind != "slot" || l.Slot != 7 || l.Cell != m.Owner(7) {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}
	if code, l, body := lookup("user:7"); code != 200 || l.Kind != "user" || l.Slot != m.SlotOf("7") {
		t.Errorf("user:7: %d %s", code, body)
	}
	for _, q := range []string{"16384", "99999999999999999999", "slot:x", "user:", "u 42", "<script>", strings.Repeat("u", 5000), ""} {
		if code, _, body := lookup(q); code != http.StatusBadRequest || !strings.Contains(body, "invalid-field") || len(body) > 600 {
			t.Errorf("q=%.20q: %d %s, want a short 400 problem", q, code, body)
		}
	}
}

func TestAnUnreachableCellAndAnUnreadableRegistry(t *testing.T) {
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80, "kcb": 40})
	realCell(t, reg, "c1")
	reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.AddCell(celltest.TestCell("c2")) })
	con, _ := newConsole(t, reg, console.Config{})
	ctx := testkit.Context(t, 30*time.Second)
	v := con.Collect(ctx)
	c1, c2 := v.Cells[0], v.Cells[1]
	if c1.Health != console.HealthOK || c1.Status == nil || c1.Release == "" || !c1.Rates.Known {
		t.Errorf("c1, a real cell: %+v", c1)
	}
	if c2.Health != console.HealthDown || c2.Reachable || !strings.Contains(c2.Error, "127.0.0.1:2") {
		t.Errorf("c2, whose admin API does not answer: %+v", c2)
	}

	// The registry cannot be read: said so, the last map kept with its
	// time.
	if err := os.Rename(reg.Path, reg.Path+".away"); err != nil {
		t.Fatal(err)
	}
	broken := con.Collect(ctx)
	if broken.Registry.OK || broken.Registry.Error == "" || broken.Map == nil || broken.Map.Version != v.Map.Version ||
		!broken.Registry.ReadAt.Equal(v.Registry.ReadAt) || len(broken.Cells) != 2 {
		t.Errorf("registry unreadable: %+v, map %+v", broken.Registry, broken.Map)
	}
	if !changed(broken, "registry", "cannot be read") {
		t.Errorf("the change log does not say the registry went: %+v", broken.Changes)
	}
	if err := os.Rename(reg.Path+".away", reg.Path); err != nil {
		t.Fatal(err)
	}
	// A drain shows, and the map's change is logged.
	ctl := control.New(reg.Reg, control.Config{Holder: "console test"}, control.Options{})
	if _, err := ctl.Apply(ctx, control.Change{Plan: control.Drain("c1", false)}); err != nil {
		t.Fatal(err)
	}
	after := con.Collect(ctx)
	if !after.Registry.OK || len(after.Drains) != 1 || after.Drains[0].Cell != "c1" || after.Drains[0].State != "draining" {
		t.Errorf("after the drain: registry %+v, drains %+v", after.Registry, after.Drains)
	}
	if !changed(after, "map", "drain c1") || !changed(after, "registry", "answers again") {
		t.Errorf("change log %+v", after.Changes)
	}
}

// realCell runs a cell process (skipped with -short) and adds it to reg's
// map; it returns the cell's admin base URL.
func realCell(t *testing.T, reg *celltest.Registry, id string, extra ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the cell binary")
	}
	sim := agencysim.Config{Latency: agencysim.FixedLatency(time.Millisecond)}
	nice, kcb := celltest.StartSim(t, telegram.NICE(), sim), celltest.StartSim(t, telegram.KCB(), sim)
	intake, admin := testkit.FreeAddr(t), testkit.FreeAddr(t)
	reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) {
		return m.AddCell(slotmap.Cell{ID: id, Weight: 1, Intake: "http://" + intake, Admin: "http://" + admin})
	})
	celltest.StartCell(t, celltest.CellProcess{ID: id, Registry: reg.URL(), Intake: intake, Admin: admin,
		Nice: nice.Addr().String(), KCB: kcb.Addr().String(), Extra: extra})
	return "http://" + admin
}

func changed(v *console.View, what, text string) bool {
	for _, c := range v.Changes {
		if c.What == what && strings.Contains(c.Text, text) {
			return true
		}
	}
	return false
}

func TestHistoryDiffsEachVersion(t *testing.T) {
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80}, celltest.TestCell("c1"), celltest.TestCell("c2"))
	ctl := control.New(reg.Reg, control.Config{Holder: "console test"}, control.Options{})
	ctx := testkit.Context(t, 10*time.Second)
	before := reg.Map()
	res, err := ctl.Apply(ctx, control.Change{Plan: control.Provision(celltest.TestCell("c3"))})
	if err != nil {
		t.Fatal(err)
	}
	_, srv := newConsole(t, reg, console.Config{})
	resp, body := get(t, srv, "/api/history", "Authorization", "Bearer "+token)
	var h struct {
		Versions []console.HistoryEntry `json:"versions"`
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil || resp.StatusCode != 200 || len(h.Versions) == 0 {
		t.Fatalf("history: %d %s", resp.StatusCode, body)
	}
	top := h.Versions[0]
	if top.Version != res.Version || top.MovedSlots != res.Plan.MovedSlots || len(top.Moves) != 2 || top.Moves[0].To != "c3" {
		t.Errorf("the newest version %+v, the change moved %d slots from v%d", top, res.Plan.MovedSlots, before.Version())
	}
	resp, body = get(t, srv, "/api/history/"+strconv.FormatInt(res.Version, 10), "Authorization", "Bearer "+token)
	var d console.Diff
	if err := json.Unmarshal([]byte(body), &d); err != nil || resp.StatusCode != 200 || d.Plan.MovedSlots != res.Plan.MovedSlots {
		t.Errorf("diff: %d %s", resp.StatusCode, body)
	}
	for path, want := range map[string]int{"/api/history/x": 400, "/api/history/1": 400, "/api/history/999": 404} {
		if resp, body := get(t, srv, path, "Authorization", "Bearer "+token); resp.StatusCode != want {
			t.Errorf("%s: %d %s, want %d", path, resp.StatusCode, body, want)
		}
	}
}

func TestEventsStreamViewsAndAreBounded(t *testing.T) {
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80}, celltest.TestCell("c1"))
	con, srv := newConsole(t, reg, console.Config{MaxStreams: 1, Interval: 50 * time.Millisecond, CallTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(testkit.Context(t, 10*time.Second))
	defer cancel()
	go con.Run(ctx)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, ct)
	}
	buf := make([]byte, 64<<10)
	var got strings.Builder
	testkit.WaitFor(t, 5*time.Second, "two views on the stream", func() bool {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		return err != nil || strings.Count(got.String(), "event: view\n") >= 2
	})
	if !strings.Contains(got.String(), `"c1"`) {
		t.Errorf("stream: %.300s", got.String())
	}
	if r, body := get(t, srv, "/api/events", "Authorization", "Bearer "+token); r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Errorf("a second stream beyond the bound: %d %s", r.StatusCode, body)
	}
}

// TestAHungCellHoldsNothingUp: a cell whose admin API accepts and never
// answers (a frozen process) is red after CallTimeout, with why; a cell of
// two instances, one of them hung, is amber with the other's figures; the
// collection takes about one CallTimeout, not one per hung process.
func TestAHungCellHoldsNothingUp(t *testing.T) {
	hung := testkit.Listen(t)
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	hungURL := "http://" + hung.Addr().String()
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80, "kcb": 40})
	alive := realCell(t, reg, "c0")
	// c2's first instance is a real cell process's admin API (c0's), its
	// second hangs.
	reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) {
		return m.AddCell(slotmap.Cell{ID: "c1", Weight: 1, Intake: "http://127.0.0.1:1", Admin: hungURL})
	})
	reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) {
		return m.AddCell(slotmap.Cell{ID: "c2", Weight: 1, Intake: "http://127.0.0.1:1", Admin: alive, Instances: []slotmap.Instance{
			{ID: "i1", Intake: "http://127.0.0.1:1", Admin: alive}, {ID: "i2", Intake: "http://127.0.0.1:1", Admin: hungURL}}})
	})
	con, _ := newConsole(t, reg, console.Config{CallTimeout: 300 * time.Millisecond})
	start := time.Now()
	v := con.Collect(testkit.Context(t, 10*time.Second))
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a collection with three hung calls took %s", took)
	}
	c1, c2 := v.Cells[1], v.Cells[2]
	if c1.Health != console.HealthDown || !strings.Contains(c1.Error, "no answer within 300ms") {
		t.Errorf("the hung cell: %s %q", c1.Health, c1.Error)
	}
	if c2.Health != console.HealthWarn || !strings.Contains(c2.Why, "i2 unreachable") || c2.Status == nil || c2.Release == "" ||
		len(c2.Instances) != 2 || !c2.Instances[0].Ready || c2.Instances[1].Reachable {
		t.Errorf("the cell with a hung instance: %+v", c2)
	}
}

// TestACellThatRefusesTheConsoleIsRed: a cell whose admin API wants a token
// the console does not have answers 401; that is no status, and the card
// says so in red rather than showing green with nothing.
func TestACellThatRefusesTheConsoleIsRed(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(tokens, []byte("the-cells-own-admin-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80, "kcb": 40})
	realCell(t, reg, "c1", "--admin-token-file", tokens)
	con, _ := newConsole(t, reg, console.Config{})
	v := con.Collect(testkit.Context(t, 10*time.Second))
	if c := v.Cells[0]; c.Health != console.HealthDown || c.Reachable || !strings.Contains(c.Error, "401") {
		t.Errorf("a cell that answers 401: health %s, reachable %v, error %q", c.Health, c.Reachable, c.Error)
	}
}
