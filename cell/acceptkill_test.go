package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestAKillAtEveryPointOfAnAccept runs a cell built with the faults tag
// and kills it (SIGKILL) at each point of a keyed acceptance, then
// restarts it on the same store: killed before the write, the inquiry is
// not there (404) and the retry takes it anew; killed after the write
// and before the answer, it is there, pending or done, and the retry gets
// it back (replayed); answered 202 and killed at once, it is there. Every
// inquiry is done under the key's one id, and none is processed again
// once done.
func TestAKillAtEveryPointOfAnAccept(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: skipped with -short")
	}
	bin := buildBinary(t, "faults") // built: the fault hooks are only in a build with the tag
	args, nice := faultsCell(t)
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	body := func(u string) inquiry.Request {
		return inquiry.Request{UserID: u, Product: "loan", Amount: 1000, Priority: inquiry.Normal}
	}
	killed := func(p *proc, what string) {
		t.Helper()
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the cell was not killed", what)
		}
	}
	done := func(p *proc, id string) {
		t.Helper()
		testkit.WaitFor(t, 15*time.Second, id+" done", func() bool {
			r, err := testkit.Send(client, "GET", p.intake+"/v1/inquiries/"+id, nil, nil)
			var v inquiry.View
			return err == nil && r.Status == http.StatusOK && json.Unmarshal(r.Body, &v) == nil && v.Status == inquiry.Done
		})
	}

	p := startBinary(t, bin, args)
	p.waitReady(t, client)
	var ids []string
	for _, tc := range []struct {
		point    string
		there    bool // the inquiry survives the kill
		replayed bool // the retry answers it as a replay
	}{{"before-write", false, false}, {"after-write", true, true}} {
		user, key := "u-"+tc.point, "k-"+tc.point
		id := celltest.KeyID("c1", "", user, key)
		hdr := map[string]string{api.HeaderIdemKey: key, "Cellkit-Fault": "kill-accept-" + tc.point}
		if r, err := testkit.Send(client, "POST", p.intake+"/v1/inquiries", body(user), hdr); err == nil {
			t.Fatalf("%s: answered %d %s, want the process killed first", tc.point, r.Status, r.Body)
		}
		killed(p, tc.point)
		p = startBinary(t, bin, args)
		p.waitReady(t, client)
		r := testkit.Do(t, client, "GET", p.intake+"/v1/inquiries/"+id, nil, nil)
		if there := r.Status == http.StatusOK; there != tc.there {
			t.Fatalf("%s: GET after the restart %d %s, want there=%v", tc.point, r.Status, r.Body, tc.there)
		}
		r = testkit.Do(t, client, "POST", p.intake+"/v1/inquiries", body(user), map[string]string{api.HeaderIdemKey: key})
		var a struct{ ID string }
		if r.Status != http.StatusAccepted || json.Unmarshal(r.Body, &a) != nil || a.ID != id || (r.Header.Get("Idempotent-Replayed") == "true") != tc.replayed {
			t.Fatalf("%s: the keyed retry answered %d %s (replayed %q), want 202 for %s, replayed=%v", tc.point, r.Status, r.Body, r.Header.Get("Idempotent-Replayed"), id, tc.replayed)
		}
		done(p, id)
		ids = append(ids, id)
	}
	// Answered, then killed at once: durable.
	r := testkit.Do(t, client, "POST", p.intake+"/v1/inquiries", body("u-answered"), nil)
	var a struct{ ID string }
	if r.Status != http.StatusAccepted || json.Unmarshal(r.Body, &a) != nil {
		t.Fatalf("POST: %d %s", r.Status, r.Body)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed(p, "answered")
	p = startBinary(t, bin, args)
	p.waitReady(t, client)
	done(p, a.ID)
	ids = append(ids, a.ID)
	// Each done, and done ones never processed again: the agencies'
	// calls stop growing once all are final (a kill while an inquiry is
	// at the agencies makes it run again after the restart: at least one
	// call each).
	calls := nice.Stats().Calls
	time.Sleep(2 * time.Second) // past the ack wait: a redelivery would have begun
	if n := nice.Stats().Calls; n != calls || n < int64(len(ids)) {
		t.Fatalf("calls to nice: %d once the inquiries %v were done, %d later; want at least one each, and no more after", calls, ids, n)
	}
}
