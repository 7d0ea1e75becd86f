package drill

import (
	"context"
	"errors"
	"fmt"
	"github.com/cellkit/cellkit/internal/api"
	"net/http"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/loadtest"
)

// Poison: under load, a burst of poison inquiries (Config.Poison of them)
// for users of one cell. The stack's cells run the build with fault hooks
// (`cellctl dev up --cell-bin bin/faults/cell`): processing a "poison-"
// user's inquiry panics in its agency call. The cell recovers each panic
// at the inquiry's boundary: every poison inquiry ends failed with
// "internal error" and dead-lettered, the cell keeps serving its other
// users without an error, the other cells see nothing, no cell restarts
// and nothing else accepted is lost or failed.
// One piece: a drill script on one timeline (the burst under load), then its checks.
func Poison(ctx context.Context, c Config) (*loadtest.Result, error) {
	c = c.withDefaults(10 * time.Second)
	st := c.Stack
	victim, err := st.Proc(c.Cell)
	if err != nil {
		return nil, err
	}
	pid := devstack.Program(*victim)
	users, err := cellUsers(ctx, st, c.Cell, "poison-", c.Poison)
	if err != nil {
		return nil, err
	}
	if c.Prometheus != "" && c.Fault+c.After < PanicAlertBound+2*time.Second {
		return nil, fmt.Errorf("drill poison: with a Prometheus the fault and the load after it must last at least %v (the alert's bound)", PanicAlertBound+2*time.Second)
	}
	end := c.Baseline + c.Fault + c.After
	r, prom, err := c.watchedLoad(ctx, end)
	if err != nil {
		return nil, err
	}
	defer prom.Stop()
	wait := startLoad(ctx, r)
	var burstAt time.Duration
	var ids []string
	var refused []string
	actErr := func() error {
		if err := sleepUntil(ctx, r, c.Baseline); err != nil {
			return err
		}
		burstAt = r.Elapsed()
		r.Mark(fmt.Sprintf("%d poison inquiries for %s", len(users), c.Cell))
		c.logf("sending %d poison inquiries for users of %s at %.1fs", len(users), c.Cell, burstAt.Seconds())
		for _, u := range users {
			id, status, err := postInquiry(ctx, st, u)
			switch {
			case err != nil:
				return err
			case status != http.StatusAccepted:
				refused = append(refused, fmt.Sprintf("%s: %d", u, status))
			default:
				ids = append(ids, id)
			}
		}
		return nil
	}()
	res, err := loadEnded("poison", wait, actErr)
	if err != nil {
		return res, err
	}
	d := &loadtest.Verdict{Name: "poison"}
	d.Check("poison inquiries accepted", len(ids) == len(users), fmt.Sprintf("%d of %d %v", len(ids), len(users), refused), "all")
	cells := loadtest.UserCells(res.Samples, 0, end)
	for _, cell := range st.Cells() {
		mine := func(u int) bool { return cells[u] == cell }
		w := loadtest.Window{From: burstAt, To: end, Users: mine}.Stats(res.Samples)
		what := cell + " errors from the burst on"
		if cell == c.Cell {
			what = cell + " (poisoned) errors for its other users from the burst on"
		}
		d.Check(what, w.Errors == 0 && w.N > 0, fmt.Sprintf("%d of %d %v", w.Errors, w.N, w.Status), "0")
		base := loadtest.Window{To: burstAt, Users: mine}.Stats(res.Samples)
		d.Note("%s p50/p99: before the burst %s/%s, from it on %s/%s", cell, msf(base.P50), msf(base.P99), msf(w.P50), msf(w.P99))
	}

	// Every poison inquiry ends failed, dead-lettered, "internal error".
	c.logf("waiting for the %d poison inquiries to settle...", len(ids))
	final := settled(ctx, adminClient, st.Router, st.APIKey, ids, c.VerifyWithin)
	good := 0
	var bad []string
	for _, id := range ids {
		v, ok := final[id]
		switch {
		case ok && v.Status == inquiry.Failed && v.DeadLetter && v.Reason == inquiry.ReasonInternal:
			good++
		case len(bad) < 3:
			bad = append(bad, fmt.Sprintf("%s %s %q dead=%v", id, v.Status, v.Reason, v.DeadLetter))
		}
	}
	d.Check("poison inquiries failed (\""+inquiry.ReasonInternal+"\") and dead-lettered", good == len(ids) && len(ids) > 0,
		fmt.Sprintf("%d of %d %s", good, len(ids), strings.Join(bad, "; ")), "all")

	// Contained in one inquiry each: the panics counted where they
	// happened, no cell restarted.
	for _, cell := range st.Cells() {
		n, err := cellPanics(ctx, st, cell)
		want := 0
		if cell == c.Cell {
			want = len(ids)
		}
		d.Check(cell+" panics recovered (cellkit_cell_panics_total)", err == nil && n == want, fmt.Sprintf("%d %v", n, errText(err)), strconv.Itoa(want))
	}
	if prom != nil {
		checkPanicAlert(d, prom.Alerts(), c.Cell, burstAt)
	}
	alive := devstack.Alive(pid) && st.program(c.Cell) == pid
	readyErr := st.WaitReady(ctx, c.Cell, 5*time.Second)
	d.Check(c.Cell+" kept running (same process, ready)", alive && readyErr == nil, fmt.Sprintf("pid %d alive %v, ready: %v", pid, alive, errText(readyErr)), "yes")

	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	v := r.Verify(ctx, res.Samples, c.VerifyWithin, c.Replays)
	d.CheckVerification(v)
	d.Check("other accepted inquiries failed", v.Failed == 0, fmt.Sprintf("%d of %d", v.Failed, v.Accepted), "0")
	d.Finish()
	res.Drill = d
	return res, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// cellUsers finds n user IDs with prefix (prefix0, prefix1, …, among the
// first 2500) that the stack's map routes to cell.
func cellUsers(ctx context.Context, st *Stack, cell, prefix string, n int) ([]string, error) {
	m, err := loadMap(ctx, st.Registry, "")
	if err != nil {
		return nil, err
	}
	var users []string
	for i := 0; i < 2500 && len(users) < n; i++ {
		if u := fmt.Sprintf("%s%d", prefix, i); m.Lookup(u).Cell == cell {
			users = append(users, u)
		}
	}
	if len(users) < n {
		return nil, fmt.Errorf("found %d users of %s, want %d", len(users), cell, n)
	}
	return users, nil
}

// postInquiry sends one inquiry for user through the router.
func postInquiry(ctx context.Context, st *Stack, user string) (id string, status int, err error) {
	var a struct {
		ID string `json:"id"`
	}
	body := inquiry.Request{UserID: user, Product: "credit_loan", Amount: 1_000_000, Priority: inquiry.Normal}
	err = requestJSON(ctx, adminClient, http.MethodPost, st.Router+api.PathInquiries, "", body, &a, "X-API-Key", st.APIKey)
	var se *statusError
	switch {
	case err == nil:
		return a.ID, http.StatusAccepted, nil
	case errors.As(err, &se):
		return "", se.code, nil
	}
	return "", 0, err
}

// cellPanics reads a cell's cellkit_cell_panics_total, summed over steps.
func cellPanics(ctx context.Context, st *Stack, cell string) (int, error) {
	n, err := cellCounter(ctx, st, cell, api.MetricCellPanics.Name)
	return int(n), err
}

// cellMetrics reads a cell's metrics.
func cellMetrics(ctx context.Context, st *Stack, cell string) (map[string]*dto.MetricFamily, error) {
	p, err := st.Proc(cell)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addrs["admin"]+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", cell, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s's metrics: %w", cell, err)
	}
	return mfs, nil
}
