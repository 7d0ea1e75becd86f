package gate

import (
	"fmt"
	"slices"
	"strings"
)

// Baseline is a window the wave is compared with, named for the record:
// the cells (or routers) still on the old release over the same window,
// the wave's own before they were replaced (a window of the bake's
// length), the earlier waves' baked on the new release over the same
// window.
type Baseline struct {
	Name   string
	Sample Sample
	// Then and Now are the baseline's control (see Of): for a baseline
	// of another window (before), the other cells' figures in that
	// window and in the wave's; for one of other cells over the same
	// window (old release, baked), those cells' figures (Then) and the
	// wave's own (Now) in a window before the wave was replaced.
	Then, Now *Sample
}

// The baselines' names.
const (
	BaselineOld    = "old release"
	BaselineBefore = "before"
	BaselineBaked  = "baked"
)

// The gates' names, as verdicts and metrics carry them.
const (
	GateIntake5xx     = "intake 5xx"
	GateIntakeRefused = "intake refusals"
	GateInquiries     = "failed inquiries"
	GateIntakeLatency = "intake latency"
	GateIntakeTail    = "intake latency tail"
	GateDoneLatency   = "time to done"
	GateDoneTail      = "time to done tail"
	GateEdge5xx       = "edge 5xx"
	GateEdgeRefused   = "edge refusals"
	GateEdgeLatency   = "edge latency"
	GateEdgeTail      = "edge latency tail"
	GateRouter5xx     = "router 5xx"
	GateRouterRefused = "router refusals"
	GateRouterLatency = "router latency"
	GateRouterTail    = "router latency tail"
	GateCrashRestarts = "crash restarts"
	GateReadinessLost = "readiness lost"
	GateAlerts        = "alerts"
)

// Gates are every gate's name (docs/metrics.md: the values of the
// rollout metrics' label gate).
var Gates = []string{GateIntake5xx, GateIntakeRefused, GateInquiries, GateIntakeLatency, GateIntakeTail,
	GateDoneLatency, GateDoneTail, GateEdge5xx, GateEdgeRefused, GateEdgeLatency, GateEdgeTail,
	GateRouter5xx, GateRouterRefused, GateRouterLatency, GateRouterTail, GateCrashRestarts, GateReadinessLost, GateAlerts}

// pick is one figure of each baseline, those whose sources (unread says
// which of a Sample's) were not all read marked so.
func pick[T any](bases []Baseline, unread func(Sample) []string, f func(Sample) T) []Of[T] {
	out := make([]Of[T], 0, len(bases))
	for _, b := range bases {
		o := Of[T]{Name: b.Name, V: f(b.Sample), Unread: strings.Join(unread(b.Sample), ", ")}
		if b.Then != nil && b.Now != nil && len(unread(*b.Then)) == 0 && len(unread(*b.Now)) == 0 {
			then, now := f(*b.Then), f(*b.Now)
			o.Then, o.Now = &then, &now
		}
		out = append(out, o)
	}
	return out
}

func cellsUnread(s Sample) []string { return s.Unread }
func edgeUnread(s Sample) []string  { return s.EdgeUnread }

// unreadWait replaces the verdicts of gates whose wave's sources could
// not all be read by a Wait saying which: figures not there are no pass,
// and a wave whose figures stay unread halts when the bake's wait is
// over (fail closed).
func unreadWait(vs []Verdict, unread []string) []Verdict {
	if len(unread) == 0 {
		return vs
	}
	for i, v := range vs {
		vs[i] = Verdict{Gate: v.Gate, Decision: Wait, P: 1, WaveSamples: v.WaveSamples,
			Text: fmt.Sprintf("%s: the wave's figures not all read (%s)", v.Gate, strings.Join(unread, ", "))}
	}
	return vs
}

// Judge runs every gate on a window of the wave against each baseline:
// failures and refusals of the intake, failures of the inquiries (an
// inquiry whose processing panicked is failed and dead-lettered: counted
// there, once), the intake's latency and the time to done with their
// tails; with routers, the routers' failures, refusals, latency and tail
// for the same cells; crash restarts and readiness losses.
func (cfg Config) Judge(wave Sample, bases []Baseline) []Verdict {
	cfg = cfg.withDefaults()
	counts := func(f func(Sample) Counts) []Of[Counts] { return pick(bases, cellsUnread, f) }
	hists := func(f func(Sample) Histogram) []Of[Histogram] { return pick(bases, cellsUnread, f) }
	vs := unreadWait([]Verdict{
		cfg.Failures(GateIntake5xx, wave.Intake, counts(func(s Sample) Counts { return s.Intake })...),
		cfg.Refusals(GateIntakeRefused, wave.Refusals, counts(func(s Sample) Counts { return s.Refusals })...),
		cfg.Failures(GateInquiries, wave.Inquiries, counts(func(s Sample) Counts { return s.Inquiries })...),
		cfg.Latency(GateIntakeLatency, wave.IntakeLatency, hists(func(s Sample) Histogram { return s.IntakeLatency })...),
		cfg.Tail(GateIntakeTail, wave.IntakeLatency, hists(func(s Sample) Histogram { return s.IntakeLatency })...),
		cfg.Latency(GateDoneLatency, wave.DoneLatency, hists(func(s Sample) Histogram { return s.DoneLatency })...),
		cfg.Tail(GateDoneTail, wave.DoneLatency, hists(func(s Sample) Histogram { return s.DoneLatency })...),
	}, wave.Unread)
	if wave.Routers > 0 || len(wave.EdgeUnread) > 0 {
		vs = append(vs, cfg.edge([4]string{GateEdge5xx, GateEdgeRefused, GateEdgeLatency, GateEdgeTail}, wave, bases)...)
	}
	return append(vs, events(wave, bases)...)
}

// JudgeRouters runs the gates of a wave of routers against each
// baseline (the routers still on the old release, the same routers
// before they were replaced, the routers already baked): their failures,
// refusals, latency and tail over every cell, crash restarts and
// readiness losses.
func (cfg Config) JudgeRouters(wave Sample, bases []Baseline) []Verdict {
	cfg = cfg.withDefaults()
	vs := cfg.edge([4]string{GateRouter5xx, GateRouterRefused, GateRouterLatency, GateRouterTail}, wave, bases)
	return append(unreadWait(vs, wave.Unread), events(wave, bases)...)
}

// edge are the gates of the routers' figures, named by names: failures,
// refusals, latency, tail.
func (cfg Config) edge(names [4]string, wave Sample, bases []Baseline) []Verdict {
	counts := func(f func(Sample) Counts) []Of[Counts] { return pick(bases, edgeUnread, f) }
	hists := pick(bases, edgeUnread, func(s Sample) Histogram { return s.EdgeLatency })
	return unreadWait([]Verdict{
		cfg.Failures(names[0], wave.Edge, counts(func(s Sample) Counts { return s.Edge })...),
		cfg.Refusals(names[1], wave.EdgeRefusals, counts(func(s Sample) Counts { return s.EdgeRefusals })...),
		cfg.Latency(names[2], wave.EdgeLatency, hists...),
		cfg.Tail(names[3], wave.EdgeLatency, hists...),
	}, wave.EdgeUnread)
}

// events are the crash-restart and readiness gates of the wave against
// its baselines.
func events(wave Sample, bases []Baseline) []Verdict {
	restarts := pick(bases, func(Sample) []string { return nil }, func(s Sample) int64 { return s.Health.Restarts })
	flaps := pick(bases, func(Sample) []string { return nil }, func(s Sample) int64 { return s.Health.Flaps })
	return []Verdict{Events(GateCrashRestarts, wave.Health.Restarts, restarts...), Events(GateReadinessLost, wave.Health.Flaps, flaps...)}
}

// Alerts fails a wave for which a Prometheus alert fires that fires for
// no process of the baselines (by alert name): an alert of every cell is
// the world's doing (an agency down), one of the wave's alone is the
// release's. wave and base are the alerts' names firing for each;
// unread says the alerts could not be read (Wait, with why: it halts
// once the bake's wait is over, fail closed).
func Alerts(wave, base []string, unread string) Verdict {
	if unread != "" {
		return Verdict{Gate: GateAlerts, Decision: Wait, P: 1, Text: "alerts: " + unread}
	}
	var own []string
	for _, a := range wave {
		if !slices.Contains(base, a) && !slices.Contains(own, a) {
			own = append(own, a)
		}
	}
	text := fmt.Sprintf("alerts: firing for the wave %s, for the baseline %s", names(wave), names(base))
	if len(own) > 0 {
		return Verdict{Gate: GateAlerts, Decision: Fail, P: 0, Text: text}
	}
	return Verdict{Gate: GateAlerts, Decision: Pass, P: 1, Text: text}
}

func names(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(slices.Compact(slices.Sorted(slices.Values(s))), ",")
}

// Events compares events too rare for a test of rates (a crash, a
// readiness lost), each process's over its window: Fail when the wave's
// worst process has more than the worst process of every baseline (none,
// with no baseline). A baseline absorbs what is not the release's doing
// — a host restarting everything, an agency outage that makes every cell
// unready — and one crash of a new release is one too many. Never Wait:
// no event is a pass however little traffic there was.
func Events(what string, wave int64, bases ...Of[int64]) Verdict {
	var most int64
	parts := make([]string, 0, len(bases))
	for _, b := range bases {
		most = max(most, b.V)
		parts = append(parts, fmt.Sprintf("%s %d", b.Name, b.V))
	}
	if len(parts) == 0 {
		parts = append(parts, "no baseline")
	}
	text := fmt.Sprintf("%s: wave's worst process %d, baselines' %s", what, wave, strings.Join(parts, ", "))
	if wave > most {
		return Verdict{Gate: what, Decision: Fail, P: 0, WaveSamples: wave, BaselineSamples: most, Text: text}
	}
	return Verdict{Gate: what, Decision: Pass, P: 1, WaveSamples: wave, BaselineSamples: most, Text: text}
}

// Overall is the verdicts' decision: Fail if one fails, else Wait if one
// waits, else Pass.
func Overall(vs []Verdict) Decision {
	d := Pass
	for _, v := range vs {
		d = max(d, v.Decision)
	}
	return d
}
