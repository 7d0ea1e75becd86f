package cellctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

// realCell is a cell process (celltest.StartCell).
type realCell struct{ *celltest.RealCell }

// startCell runs the cell program as cell id against the registry url and
// waits until it is ready.
func startCell(t *testing.T, id, registryURL, intakeAddr, adminAddr, nice, kcb string) *realCell {
	t.Helper()
	return startCellWith(t, id, registryURL, intakeAddr, adminAddr, nice, kcb, nil)
}

// startCellWith is startCell, with both listeners on mutual TLS with certs'
// cell certificate if certs is not nil, and with the cell flags extra.
func startCellWith(t *testing.T, id, registryURL, intakeAddr, adminAddr, nice, kcb string, certs *celltest.Certs, extra ...string) *realCell {
	t.Helper()
	return &realCell{celltest.StartCell(t, celltest.CellProcess{ID: id, Registry: registryURL, Intake: intakeAddr, Admin: adminAddr,
		Nice: nice, KCB: kcb, Certs: certs, Extra: extra})}
}

// post sends one inquiry and returns its id.
func (c *realCell) post(t *testing.T, user, priority string) string {
	t.Helper()
	return c.postKeyed(t, user, priority, "")
}

// postKeyed sends one inquiry with Idempotency-Key key ("": none) and
// returns its id.
func (c *realCell) postKeyed(t *testing.T, user, priority, key string) string {
	t.Helper()
	body := fmt.Sprintf(`{"user_id":%q,"product":"credit_loan","amount":5000000,"priority":%q}`, user, priority)
	req, _ := http.NewRequest(http.MethodPost, c.Intake+"/v1/inquiries", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(api.HeaderIdemKey, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		ID     string `json:"id"`
		Detail string `json:"detail"`
	}
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST inquiry for %s = %d %s", user, resp.StatusCode, out.Detail)
	}
	return out.ID
}

func (c *realCell) inquiryStatus(t *testing.T, id string) string {
	t.Helper()
	_, status := c.read(t, id, false)
	return status
}

// TestDrainWaitRealCell drains a real cell (its binary, embedded NATS, two
// agency simulators answering in 150 ms) that has a queue of work: drain
// --wait returns only once the queue is empty and every inquiry is done,
// and only then is the cell marked drained.
func TestDrainWaitRealCell(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the cell binary")
	}
	sim := agencysim.Config{Latency: agencysim.FixedLatency(150 * time.Millisecond)}
	nice := celltest.StartSim(t, telegram.NICE(), sim).Addr().String()
	kcb := celltest.StartSim(t, telegram.KCB(), sim).Addr().String()
	forEachBackend(t, func(t *testing.T, e *env) {
		intakeAddr, adminAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
		// Two sessions per agency for c1: with two workers, about 10
		// inquiries a second.
		e.ok("init", "--agency", "nice=4", "--agency", "kcb=4", "--slots", "4096")
		e.ok("provision", "c1", "--intake", "http://"+intakeAddr, "--admin", "http://"+adminAddr)
		e.ok("provision", "c2", "--intake", "http://127.0.0.1:1", "--admin", "http://127.0.0.1:1", "--leave-data")
		cell := startCell(t, "c1", e.url, intakeAddr, adminAddr, nice, kcb)

		m := e.load()
		var ids []string
		for i := 0; len(ids) < 30; i++ {
			u := fmt.Sprintf("user-%d", i)
			if m.Lookup(u).Cell != "c1" {
				continue
			}
			prio := "normal"
			if len(ids)%4 == 0 {
				prio = "high"
			}
			ids = append(ids, cell.post(t, u, prio))
		}

		var st statusJSON
		e.json(&st, "status")
		if c := st.Cells[0]; c.Status == nil || c.Status.Pending() == 0 {
			t.Fatalf("c1 has no queued work before the drain: %+v", c)
		}

		// c2 does not run: its users' inquiries stay in c1 (--leave-data),
		// which works them off while it drains.
		r := e.ok("drain", "c1", "--wait", "--interval", "200ms", "--leave-data")
		t.Logf("drain --wait:\n%s", r.stdout)

		// Finished only when the queue was empty: every inquiry is done.
		for _, id := range ids {
			if s := cell.inquiryStatus(t, id); s != "done" {
				t.Errorf("inquiry %s is %q after drain --wait, want done", id, s)
			}
		}
		var after api.CellStatus
		if err := (adminclient.Client{HTTP: http.DefaultClient}).Call(context.Background(), http.MethodGet, cell.Admin, "/v1/admin/status", nil, &after); err != nil {
			t.Fatal(err)
		}
		if after.Pending() != 0 || after.IntakeOpen() {
			t.Errorf("cell after drain --wait: pending %d, intake %s", after.Pending(), after.Intake)
		}
		if !strings.Contains(r.stdout, "Intake of c1 closed.") || !strings.Contains(r.stdout, "c1's queue and in-flight work are empty after") ||
			!regexpMatch(`waiting for c1: queue high \d+ normal [1-9]\d*`, r.stdout) {
			t.Errorf("drain output lacks the intake close, a non-empty progress line or the end of the wait:\n%s", r.stdout)
		}
		m = e.load()
		if c, _ := m.Cell("c1"); c.State != slotmap.Drained || len(c.Quota) != 0 || m.Quota("c2", "nice") != 4 {
			t.Errorf("after drain --wait: c1 %+v, c2 nice quota %d", c, m.Quota("c2", "nice"))
		}

		// The cell's other admin calls, for real.
		r = e.ok("circuit", "c1", "nice", "open")
		if r.stdout != "c1 nice breaker: forced_open (open).\n" {
			t.Errorf("circuit open: %q", r.stdout)
		}
		e.ok("circuit", "c1", "nice", "reset")
		var failed []api.FailedInquiry
		e.json(&failed, "failed", "list", "c1")
		if len(failed) != 0 {
			t.Errorf("failed inquiries after a clean drain: %+v", failed)
		}
		r = e.run("failed", "retry", "c1", "c1-nosuchinquiry")
		if r.code != ExitFailure || !strings.Contains(r.stdout, "c1-nosuchinquiry: not retried:") {
			t.Errorf("%v", r)
		}
	})
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// TestDrainAndRemoveMoveTheUsersInquiries: a drain hands the users'
// inquiries, pending ones too, to the cells that take their slots,
// verified, before the map changes: the drained cell keeps none, the new
// cell answers for every one and works the pending ones, each once. A
// remove of a cell that does not answer is refused, nothing changed,
// unless --force; the removed cell's users read their inquiries and get
// them back on a keyed retry.
func TestDrainAndRemoveMoveTheUsersInquiries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the cell binary")
	}
	sim := agencysim.Config{Latency: agencysim.FixedLatency(150 * time.Millisecond)}
	niceSim, kcbSim := celltest.StartSim(t, telegram.NICE(), sim), celltest.StartSim(t, telegram.KCB(), sim)
	nice, kcb := niceSim.Addr().String(), kcbSim.Addr().String()
	e := newFileEnv(t)
	e.ok("init", "--agency", "nice=4", "--agency", "kcb=4", "--slots", "4096")
	addrs := map[string][2]string{}
	for _, id := range []string{"c1", "c2"} {
		addrs[id] = [2]string{testkit.FreeAddr(t), testkit.FreeAddr(t)}
		// Nothing runs yet: nothing to move.
		e.ok("provision", id, "--intake", "http://"+addrs[id][0], "--admin", "http://"+addrs[id][1], "--leave-data")
	}
	cells := map[string]*realCell{}
	for id, a := range addrs {
		cells[id] = startCell(t, id, e.url, a[0], a[1], nice, kcb)
	}
	m := e.load()
	var ids, users []string
	for i := 0; len(ids) < 30; i++ {
		if u := fmt.Sprintf("user-%d", i); m.Lookup(u).Cell == "c1" {
			ids = append(ids, cells["c1"].postKeyed(t, u, "normal", "key-"+u))
			users = append(users, u)
		}
	}
	var st statusJSON
	e.json(&st, "status")
	if c := st.Cells[0]; c.Status == nil || c.Status.Pending() == 0 {
		t.Fatalf("c1 has no queued work before the drain: %+v", c)
	}

	// The plan says what would move and how long the copy takes.
	r := e.ok("drain", "c1", "--dry-run", "--move-rate", "10")
	var n int
	if _, err := fmt.Sscanf(r.stdout[max(0, strings.Index(r.stdout, "Data to move: ")):], "Data to move: %d messages", &n); err != nil || n < len(ids) ||
		!strings.Contains(r.stdout, "to copy at --move-rate 10") {
		t.Errorf("the drain's plan does not say what would move (%d messages, %v):\n%s", n, err, r.stdout)
	}
	r = e.ok("drain", "c1", "--wait", "--interval", "200ms")
	if !strings.Contains(r.stderr, "Move v4-c1-c2: copying") {
		t.Errorf("the drain does not say it moves c1's inquiries:\n%v", r)
	}
	for _, id := range ids {
		if code, _ := cells["c1"].read(t, id, true); code != http.StatusNotFound {
			t.Errorf("c1 still holds %s after its drain (%d)", id, code)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "c2 to finish c1's former inquiries", func() bool {
		for _, id := range ids {
			if _, status := cells["c2"].read(t, id, true); status != "done" {
				return false
			}
		}
		return true
	})
	for _, s := range []*agencysim.Server{niceSim, kcbSim} {
		if calls := s.Stats().Calls; calls != int64(len(ids)) {
			t.Errorf("%s called %d times for %d inquiries, want once each", s.Profile().Name, calls, len(ids))
		}
	}

	cells["c1"].Stop()
	before := e.raw()
	r = e.run("remove", "c1")
	if r.code != ExitFailure || !strings.Contains(r.stderr, "cell c1 does not answer") || !strings.Contains(r.stderr, "--force") || !bytes.Equal(before, e.raw()) {
		t.Errorf("remove of a cell that does not answer: %v", r)
	}
	e.ok("remove", "c1", "--force")
	for i, id := range ids {
		if code, status := cells["c2"].read(t, id, false); code != http.StatusOK || status != "done" {
			t.Errorf("%s after c1's removal: %d %s", id, code, status)
		}
		// A keyed retry gets its inquiry, the cell that took it gone.
		if again := cells["c2"].postKeyed(t, users[i], "normal", "key-"+users[i]); again != id {
			t.Errorf("keyed retry of %s after c1's removal: %s", id, again)
		}
	}
}

// read reads inquiry id (local: from the cell's own store only) and
// returns the answer's status code and the inquiry's status.
func (c *realCell) read(t *testing.T, id string, local bool) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.Intake+"/v1/inquiries/"+id, nil)
	if local {
		req.Header.Set(api.HeaderLocalRead, "1")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Status string `json:"status"`
	}
	json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v.Status
}
