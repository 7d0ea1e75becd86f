package drill

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/loadtest"
)

// MoveRate is the rate (messages a second per move) the moves drill's
// changes copy at, sparing the cells' stores under load.
const MoveRate = 500

// MovesSlowFactor multiplies the agencies' latency for the moves drill
// (the local stack's 50 ms median becomes 200 ms; more, and the two cells left at the end shed): a cell's inquiries
// outnumber its sessions and wait in its queue, so that every fence finds
// pending work to hand over.
const MovesSlowFactor = 4

// movePhase is one change of the moves drill: the cellctl command it ran,
// when, and what its data moves did (its --json's).
type movePhase struct {
	name       string
	from, to   time.Duration
	moves      []api.MoveProgress
	refusedOut string        // a change refused on purpose: its one line
	killAt     time.Duration // when its source was killed, if it was
}

// drainKilledMidCopy drains c3 and SIGKILLs it while its first move
// copies: the change must be refused (and is called off by `move resume`
// once c3 is back, at the phase's end).
func drainKilledMidCopy(ctx context.Context, c Config, r *loadtest.Runner) (*movePhase, error) {
	st := c.Stack
	p := &movePhase{name: "drain c3, c3 killed while it copies", from: r.Elapsed()}
	r.Mark(p.name)
	dctx, cancel := context.WithTimeout(ctx, c.Fault)
	defer cancel()
	refused := make(chan error, 1)
	var out string
	go func() {
		var err error
		out, err = st.Cellctl(dctx, "drain", "c3", "--wait", "--move-rate=100")
		refused <- err
	}()
	if err := until(ctx, c.Fault, "c3's drain copying", func(ctx context.Context) (bool, error) {
		s, _ := st.Cellctl(ctx, "move", "status", "--json")
		return strings.Contains(s, `"step": "copying"`), nil
	}); err != nil {
		return p, err
	}
	if err := st.Kill(ctx, "c3"); err != nil {
		return p, err
	}
	p.killAt = r.Elapsed()
	r.Mark("c3 killed")
	c.logf("c3 killed (SIGKILL) at %.1fs, in the middle of its copy", p.killAt.Seconds())
	if err := <-refused; err == nil {
		return p, fmt.Errorf("c3's drain went through with c3 killed in the middle of its copy:\n%s", out)
	}
	p.refusedOut = lastLine(out)
	if err := st.Restart("c3"); err != nil {
		return p, err
	}
	if err := st.WaitReady(ctx, "c3", c.Fault); err != nil {
		return p, err
	}
	p.to = r.Elapsed()
	r.Mark("c3 back")
	c.logf("c3 back at %.1fs; the change it cut: %s", p.to.Seconds(), p.refusedOut)
	_, err := st.Cellctl(ctx, "move", "resume")
	return p, err
}

// Moves: users' inquiries moving with them under load
// (docs/operations.md "Data moves"), the agencies MovesSlowFactor times
// slower so that work is pending at every fence. Four changes, each a cellctl
// command at --move-rate MoveRate: a weight that gives c1 about a sixth
// of the users more, a drain of c2, the removal of c2, then a drain of
// c3 whose source (c3) is SIGKILLed while its copy runs — the change
// refused and called off, nothing changed, `move resume` after c3 is
// back, then the drain again. The load reads accepted inquiries through
// the routers throughout (ReadShare): none may answer 404, and every
// read but those of the killed cell's users while it is down answers
// 200. Then every accepted inquiry ends final, none lost, none whose
// final result changes (processed once), and keyed retries get their
// ids back; the users no change moved see no error; the p99 while the
// changes ran within P99Factor of the baseline's. The stack is put back (c2
// provisioned again, c3 undrained, c1's weight 1). One piece: a drill
// script on one timeline (movesVerdict checks what it marked).
func Moves(ctx context.Context, c Config) (*loadtest.Result, error) {
	c = c.withDefaults(60 * time.Second)
	if c.ReadShare <= 0 {
		c.ReadShare = 0.3
	}
	st := c.Stack
	for _, cell := range []string{"c1", "c2", "c3"} {
		if _, err := st.Proc(cell); err != nil {
			return nil, fmt.Errorf("drill moves needs cells c1, c2 and c3: %w", err)
		}
	}
	before, err := loadMap(ctx, st.Registry, "")
	if err != nil {
		return nil, err
	}
	c2, _ := before.Cell("c2")
	rate := "--move-rate=" + strconv.Itoa(MoveRate)
	setLatency, err := agencyLatencyScaler(ctx, st)
	if err != nil {
		return nil, err
	}
	if err := setLatency(ctx, MovesSlowFactor); err != nil {
		return nil, err
	}
	defer func() { _ = setLatency(context.WithoutCancel(ctx), 1) }()
	r, err := c.runner(c.Baseline + 4*c.Fault + c.After)
	if err != nil {
		return nil, err
	}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	wait := startLoad(lctx, r)
	var phases []*movePhase
	var killAt, backAt time.Duration
	change := func(name string, args ...string) error {
		p := &movePhase{name: name, from: r.Elapsed()}
		phases = append(phases, p)
		r.Mark(name)
		c.logf("cellctl %s at %.1fs", name, p.from.Seconds())
		cctx, cancel := context.WithTimeout(ctx, c.Fault)
		defer cancel()
		out, err := st.Cellctl(cctx, append(args, rate, "--json")...)
		p.to = r.Elapsed()
		if err != nil {
			return err
		}
		p.moves = movesOf(out)
		c.logf("%s done at %.1fs: %d moves", name, p.to.Seconds(), len(p.moves))
		return sleepUntil(ctx, r, p.to+c.After/2)
	}
	actErr := func() error {
		if err := sleepUntil(ctx, r, c.Baseline); err != nil {
			return err
		}
		if err := change("weight c1 2", "weight", "c1", "2"); err != nil {
			return err
		}
		if err := change("drain c2", "drain", "c2", "--wait"); err != nil {
			return err
		}
		if err := change("remove c2", "remove", "c2"); err != nil {
			return err
		}
		p, err := drainKilledMidCopy(ctx, c, r)
		phases = append(phases, p)
		if err != nil {
			return err
		}
		killAt, backAt = p.killAt, p.to
		return change("drain c3 again", "drain", "c3", "--wait")
	}()
	stopLoad()
	res, err := loadEnded("moves", wait, actErr)
	if err != nil {
		return res, err
	}
	d := movesVerdict(c, res.Samples, phases, killAt, backAt, r.Elapsed())
	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	d.CheckVerification(r.Verify(ctx, res.Samples, c.VerifyWithin, c.Replays))

	// Put the stack back.
	for _, args := range [][]string{
		{"provision", "c2", "--intake", c2.Intake, "--admin", c2.Admin},
		{"undrain", "c3"},
		{"weight", "c1", "1"},
	} {
		if _, err := st.Cellctl(ctx, args...); err != nil {
			return res, err
		}
	}
	res.Events = append(res.Events, loadtest.Event{At: r.Elapsed(), Name: "stack put back"})
	d.Finish()
	res.Drill = d
	return res, nil
}

// movesVerdict checks the moves drill's samples: the reads, the users no
// change moved, each change's moves and the p99 while they ran. The
// killed cell was down from killAt to backAt; end is the load's end.
func movesVerdict(c Config, samples []loadtest.Sample, phases []*movePhase, killAt, backAt, end time.Duration) *loadtest.Verdict {
	d := &loadtest.Verdict{Name: "moves"}
	first := phases[0].from

	// Readability: every read answered, none 404; the reads of the
	// inquiries of the killed cell's users while it is down (and until
	// the routers find it back) answer 503. A read's user is the
	// inquiry's, not the one its sample drew.
	news := writes(samples)
	userOf := map[string]int{}
	for _, s := range news {
		if s.ID != "" {
			userOf[s.ID] = s.User
		}
	}
	atKill := loadtest.UserCells(news, first, killAt)
	var reads, notFound int
	failed := map[string]int{}
	down := func(s loadtest.Sample) bool {
		u, ok := userOf[s.ID]
		return ok && atKill[u] == "c3" && s.At >= killAt && s.At < backAt+ThawedBound
	}
	for _, s := range samples {
		if !s.Read {
			continue
		}
		reads++
		switch {
		case s.Status == http.StatusNotFound:
			notFound++
		case !s.OK() && !down(s):
			failed[fmt.Sprintf("%d %s at %.0fs", s.Status, cmp.Or(s.Problem, s.Err), s.At.Seconds())]++
		}
	}
	d.Check("reads of accepted inquiries through the routers: 404", reads > 0 && notFound == 0, fmt.Sprintf("%d of %d", notFound, reads), "0")
	d.Check("reads: not answered 200 (but the killed cell's while it is down)", len(failed) == 0, fmt.Sprintf("%d of %d %v", sum(failed), reads, failed), "0")

	// The users no change moved: no error.
	startCells := loadtest.UserCells(news, 0, first)
	endCells := loadtest.UserCells(news, phases[len(phases)-1].to, end)
	stayed := func(u int) bool { a, ok := startCells[u]; return ok && a != "" && endCells[u] == a }
	kept := loadtest.Window{From: first, To: end, Users: stayed}.Stats(news)
	keptErrs := map[string]int{}
	for _, s := range news {
		if s.At >= first && stayed(s.User) && !s.OK() {
			keptErrs[fmt.Sprintf("%d %s %s at %.0fs", s.Status, cmp.Or(s.Problem, s.Err), s.Cell, s.At.Seconds())]++
		}
	}
	d.Check("users no change moved: errors", kept.N > 0 && kept.Errors == 0, fmt.Sprintf("%d of %d %v", kept.Errors, kept.N, keptErrs), "0")
	moved := loadtest.Window{From: first, To: end, Users: func(u int) bool { return !stayed(u) }}.Stats(news)
	d.Note("moved users' requests from the first change on: %d of %d not accepted %v (user-moving: the fence; 503 while c3 was down)", moved.Errors, moved.N, moved.Status)

	// Each change: its moves, and the p99 while it ran against the
	// baseline's.
	base := loadtest.Window{To: first}.Stats(samples)
	var changing []time.Duration // [from, to) of each change that went through
	for _, p := range phases {
		if p.refusedOut != "" {
			d.Note("%s: refused after %.1fs (%s); c3 back %.1fs after its kill, the moves called off by 'cellctl move resume'", p.name, (killAt - p.from).Seconds(), p.refusedOut, (backAt - killAt).Seconds())
			continue
		}
		var slots, users, copied, handed, messages, bytes int
		var fenced time.Duration
		verified := len(p.moves) > 0
		for _, m := range p.moves {
			if m.Fenced != nil && m.Finished != nil {
				fenced = max(fenced, m.Finished.Sub(*m.Fenced))
			}
			slots += len(m.Spec.Slots)
			users += len(m.Spec.Users)
			copied += m.Copied + m.Again
			handed += m.Handed
			messages += m.Messages
			bytes += m.Bytes
			verified = verified && (m.Verified || m.Step == "done")
		}
		d.Check(p.name+": its moves verified", verified, fmt.Sprintf("%d moves, %d slots, %d messages compared", len(p.moves), slots, messages), "every move")
		during := loadtest.Window{From: p.from, To: p.to + time.Second}.Stats(samples)
		d.Note("%s: %.1fs, %d moves, %d slots and %d users, %d messages copied (%d KiB), %d pending handed over, the users fenced for at most %.1fs; p99 %s (%d requests)",
			p.name, (p.to - p.from).Seconds(), len(p.moves), slots, users, copied, bytes>>10, handed, fenced.Seconds(), msf(during.P99), during.N)
		changing = append(changing, p.from, p.to+time.Second)
	}
	// The p99 while the changes ran, pooled over them (a change of a
	// second at 100/s has too few requests for a p99 of its own), against
	// the baseline's.
	var during []loadtest.Sample
	for _, s := range samples {
		for i := 0; i < len(changing); i += 2 {
			if s.At >= changing[i] && s.At < changing[i+1] {
				during = append(during, s)
				break
			}
		}
	}
	checkTail(d, "p99 while the changes ran", during, base, "before the first change", loadtest.Window{To: end}, c.P99Factor)
	return d
}

// writes are samples' new inquiries (their reads left out).
func writes(samples []loadtest.Sample) []loadtest.Sample {
	var out []loadtest.Sample
	for _, s := range samples {
		if !s.Read {
			out = append(out, s)
		}
	}
	return out
}

// movesOf reads the data moves out of a map change's --json (a change's
// "moves", or a drain's changes').
func movesOf(out string) []api.MoveProgress {
	var doc struct {
		Moves []api.MoveProgress `json:"moves"`
		Drain *struct {
			Moves []api.MoveProgress `json:"moves"`
		} `json:"drain"`
		MarkDrained *struct {
			Moves []api.MoveProgress `json:"moves"`
		} `json:"mark_drained"`
	}
	// The output is the notes (stderr) and then the document (stdout),
	// which starts a line with "{".
	at := strings.Index(out, "\n{")
	if !strings.HasPrefix(out, "{") && at < 0 {
		return nil
	}
	if err := json.NewDecoder(strings.NewReader(out[at+1:])).Decode(&doc); err != nil {
		return nil
	}
	moves := doc.Moves
	for _, ch := range []*struct {
		Moves []api.MoveProgress `json:"moves"`
	}{doc.Drain, doc.MarkDrained} {
		if ch != nil {
			moves = append(moves, ch.Moves...)
		}
	}
	return moves
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// sum adds up n's counts.
func sum(n map[string]int) int {
	t := 0
	for _, v := range n {
		t += v
	}
	return t
}
