package cellctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/registry"
)

// move status shows the record a map change left beside the map (or that
// none is there); move resume with none under way does nothing, and with
// one whose cells do not answer fails in one line, the record kept.
func TestMoveStatusAndResume(t *testing.T) {
	e := newFileEnv(t)
	e.setup([]string{"c1", "c2"}, nil)
	if r := e.ok("move", "status"); !strings.HasPrefix(r.stdout, "No data move under way in ") {
		t.Errorf("move status with none: %q", r.stdout)
	}
	if r := e.ok("move", "status", "--json"); strings.TrimSpace(r.stdout) != `{"moves":[]}` && !strings.Contains(r.stdout, `"moves": []`) {
		t.Errorf("move status --json with none: %q", r.stdout)
	}
	if r := e.ok("move", "resume"); !strings.HasPrefix(r.stdout, "No data move under way") {
		t.Errorf("move resume with none: %q", r.stdout)
	}

	reg := e.open()
	defer reg.Close()
	rec := api.MovesRecord{Version: 99, Change: "weight c2 3", Phase: api.MovesCommitted, Holder: "cellctl weight by ops@host",
		Moves: []api.MoveProgress{{Spec: api.MoveSpec{ID: "v99-c1-c2", From: "c1", To: "c2", Slots: []int{1, 2, 3}}, Step: "verified",
			Copied: 120, Bytes: 48_000, Handed: 4, Slots: 3, Messages: 120, Verified: true}}}
	data, _ := json.Marshal(rec)
	if err := registry.DocumentFor(reg, api.MovesDocument).Put(context.Background(), data, 0); err != nil {
		t.Fatal(err)
	}
	r := e.ok("move", "status")
	for _, want := range []string{"Data moves of map version 99 (weight c2 3): committed", "v99-c1-c2", "verified", "yes (3 slots, 120 messages)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("move status does not say %q:\n%s", want, r.stdout)
		}
	}
	var got api.MovesRecord
	if err := json.Unmarshal([]byte(e.ok("move", "status", "--json").stdout), &got); err != nil || got.Version != 99 || len(got.Moves) != 1 {
		t.Errorf("move status --json: %+v, %v", got, err)
	}
	// The map is older than the record: the moves are called off, which
	// asks cells that do not answer here.
	r = e.run("move", "resume")
	if r.code != ExitFailure || strings.Count(strings.TrimSpace(r.stderr), "\n") > 2 || !strings.Contains(r.stderr, "call off the data moves of map version 99") {
		t.Errorf("move resume with cells that do not answer: %v", r)
	}
	if r := e.ok("move", "status"); !strings.Contains(r.stdout, "v99-c1-c2") {
		t.Errorf("the record is gone after a failed resume:\n%s", r.stdout)
	}
}
