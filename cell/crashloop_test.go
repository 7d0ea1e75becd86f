package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/pipeline"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestCrashLoopEndsInQuarantine runs a cell built with the faults tag, whose
// pipeline crashes the whole process (a panic on a goroutine of its own)
// while it works on a "crash-" user's inquiry. The test restarts it like a
// supervisor: the second start counts the crash and runs the inquiry again
// alone (crash again), the third quarantines it and stays up, serving the
// other users.
func TestCrashLoopEndsInQuarantine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: skipped with -short")
	}
	bin := buildBinary(t, "faults") // built: the fault hooks are only in a build with the tag
	args, _ := faultsCell(t, "--quarantine-after", "2", "--max-deliver", "5")
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	req := func(u string) inquiry.Request {
		return inquiry.Request{UserID: u, Product: "loan", Amount: 1000, Priority: inquiry.Normal}
	}
	post := func(p *proc, u string) string {
		t.Helper()
		r := testkit.Do(t, client, "POST", p.intake+"/v1/inquiries", req(u), nil)
		var a struct{ ID string }
		if r.Status != http.StatusAccepted || json.Unmarshal(r.Body, &a) != nil {
			t.Fatalf("POST for %s: %d %s", u, r.Status, r.Body)
		}
		return a.ID
	}
	view := func(p *proc, id string) inquiry.View {
		t.Helper()
		var v inquiry.View
		testkit.Do(t, client, "GET", p.intake+"/v1/inquiries/"+id, nil, nil).JSON(t, &v)
		return v
	}
	crashed := func(p *proc, what string) {
		t.Helper()
		select {
		case err := <-p.exited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("%s: exit %v, want a crash", what, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the cell did not crash", what)
		}
	}

	p := startBinary(t, bin, args)
	p.waitReady(t, client)
	before := post(p, "user-1")
	testkit.WaitFor(t, 10*time.Second, "a normal inquiry done", func() bool { return view(p, before).Status == inquiry.Done })
	// The cell may die before it answers: the inquiry is queued first.
	testkit.Send(client, "POST", p.intake+"/v1/inquiries", req("crash-1"), nil)
	crashed(p, "first run")

	p = startBinary(t, bin, args) // counts the crash; the redelivery runs alone, and crashes it again
	crashed(p, "second run")

	p = startBinary(t, bin, args) // quarantines it
	p.waitReady(t, client)
	var dead struct {
		Failed []struct {
			ID     string `json:"id"`
			UserID string `json:"user_id"`
			Set    string `json:"set"`
		} `json:"failed"`
	}
	testkit.Do(t, client, "GET", p.admin+"/v1/admin/failed", nil, nil).JSON(t, &dead)
	if len(dead.Failed) != 1 || dead.Failed[0].UserID != "crash-1" || dead.Failed[0].Set != "dlq" {
		t.Fatalf("failed list %+v, want crash-1's inquiry as a dead letter", dead.Failed)
	}
	v := view(p, dead.Failed[0].ID)
	if v.Status != inquiry.Failed || !v.DeadLetter || !strings.HasPrefix(v.Reason, pipeline.ReasonSuspected+": in flight at 2 crashes") {
		t.Fatalf("the crashing inquiry: %+v, want failed as %s and dead-lettered", v, pipeline.ReasonSuspected)
	}
	after := post(p, "user-2")
	testkit.WaitFor(t, 10*time.Second, "a normal inquiry done after the quarantine", func() bool { return view(p, after).Status == inquiry.Done })
	// Past the ack wait, nothing is left to crash it.
	select {
	case err := <-p.exited:
		t.Fatalf("the cell exited after the quarantine: %v", err)
	case <-time.After(3 * time.Second):
	}
	if v := view(p, before); v.Status != inquiry.Done {
		t.Errorf("the inquiry done before the crashes: %+v", v)
	}
}

// faultsCell is the arguments of a cell c1 for a faults build, with its
// store in a directory of the test's, its agencies simulated (5 ms, 8
// sessions each; nice returned) and an ack wait of 1 s, then extra.
func faultsCell(t *testing.T, extra ...string) ([]string, *agencysim.Server) {
	t.Helper()
	sim := agencysim.Config{MaxSessions: 8, Latency: agencysim.FixedLatency(5 * time.Millisecond)}
	nice := celltest.StartSim(t, telegram.NICE(), sim)
	kcb := celltest.StartSim(t, telegram.KCB(), sim)
	reg := celltest.NewRegistry(t, map[string]int{"nice": 4, "kcb": 4}, celltest.TestCell("c1"))
	args := []string{
		"--cell", "c1", "--registry", reg.URL(), "--store", filepath.Join(t.TempDir(), "store"),
		"--agency", "nice=" + nice.Addr().String(), "--agency", "kcb=" + kcb.Addr().String(),
		"--intake", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--nats-port", "-1", "--ack-wait", "1s",
	}
	return append(args, extra...), nice
}
