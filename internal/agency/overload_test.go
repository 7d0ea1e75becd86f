package agency_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/cellkit/cellkit/internal/agency"
	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/telegram"
)

var overloadDuration = flag.Duration("overload.duration", 10*time.Second, "how long BenchmarkOverload offers each load")

// BenchmarkOverload is the agency link's benchmark, side by side in one run:
// a simulator answering in 50 ms, 20 sessions (so the bound is
// S/L = 400 calls/s), offered 2× and 10× that open-loop. It reports goodput
// over the bound, p50 and p99 of admitted calls and rejections, for the
// pooled client (breaker + adaptive limit + pool) and for the baseline the
// field started from: a new connection per call against the same limit.
//
//	go test -run '^$' -bench Overload -benchtime 1x ./internal/agency/
func BenchmarkOverload(b *testing.B) {
	const sessions, latency = 20, 50 * time.Millisecond
	bound := float64(sessions) / latency.Seconds()
	var rows []overloadResult
	for _, mult := range []float64{2, 10} {
		rate := bound * mult
		b.Run(fmt.Sprintf("pooled/%.0fx", mult), func(b *testing.B) {
			sim := celltest.StartSim(b, telegram.NICE(), agencysim.Config{MaxSessions: sessions, Latency: agencysim.FixedLatency(latency)})
			c := newClient(b, agency.Config{Name: "nice", Addr: sim.Addr().String(), Sessions: sessions}, agency.Options{})
			for i := 0; i < b.N; i++ {
				r := offer(rate, *overloadDuration, func(ctx context.Context, user string) error {
					_, err := c.Inquire(ctx, user)
					return err
				})
				r.name, r.bound = b.Name(), bound
				r.report(b)
				rows = append(rows, r)
			}
		})
		b.Run(fmt.Sprintf("dial-per-call/%.0fx", mult), func(b *testing.B) {
			sim := celltest.StartSim(b, telegram.NICE(), agencysim.Config{MaxSessions: sessions, Latency: agencysim.FixedLatency(latency)})
			addr := sim.Addr().String()
			for i := 0; i < b.N; i++ {
				r := offer(rate, *overloadDuration, func(ctx context.Context, user string) error {
					return dialPerCall(ctx, addr, user)
				})
				r.name, r.bound = b.Name(), bound
				r.report(b)
				rows = append(rows, r)
			}
		})
	}
	printOverload(rows)
}

// dialPerCall is the baseline client: connect, ask, hang up.
func dialPerCall(ctx context.Context, addr, user string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	dl, _ := ctx.Deadline()
	nc.SetDeadline(dl)
	p := telegram.NICE()
	frame, err := p.AppendFrame(nil, &telegram.Message{Type: telegram.Request, TraceNo: 1, UserKey: user, RespCode: telegram.CodeOK})
	if err != nil {
		return err
	}
	if _, err := nc.Write(frame); err != nil {
		return err
	}
	body, err := p.NewReader(nc).ReadFrame()
	if err != nil {
		return err
	}
	var resp telegram.Message
	if err := p.Decode(body, &resp); err != nil {
		return err
	}
	if resp.RespCode != telegram.CodeOK {
		return &agency.CodeError{Agency: p.Name, Code: resp.RespCode, Text: resp.Text}
	}
	return nil
}

type overloadResult struct {
	name                         string
	bound, offered               float64
	elapsed                      time.Duration
	ok, limited, open, exhausted int
	failed                       int
	admitted                     []time.Duration // latency of successful calls, from their intended start
	rejectLatency                []time.Duration
	firstErr                     error
}

func (r overloadResult) goodput() float64 { return float64(r.ok) / r.elapsed.Seconds() }

func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

func (r overloadResult) report(b *testing.B) {
	b.ReportMetric(r.goodput()/r.bound, "goodput/bound")
	b.ReportMetric(float64(pct(r.admitted, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(r.admitted, 0.99).Microseconds())/1000, "p99-ms")
	if p50 := pct(r.admitted, 0.5); p50 > 0 {
		b.ReportMetric(float64(pct(r.admitted, 0.99))/float64(p50), "p99/p50")
	}
	b.ReportMetric(float64(r.limited+r.open+r.exhausted), "rejected")
	b.ReportMetric(float64(r.failed), "errors")
}

// offer runs an open-loop load: calls start at their scheduled times whether
// or not earlier ones finished, and latency counts from the scheduled time,
// so a slow system cannot hide queueing (no coordinated omission).
func offer(rate float64, d time.Duration, call func(context.Context, string) error) overloadResult {
	r := overloadResult{offered: rate}
	interval := time.Duration(float64(time.Second) / rate)
	total := int(d / interval)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	start := time.Now()
	for i := 0; i < total; i++ {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := call(context.Background(), fmt.Sprintf("user-%d", i%5000))
			took := time.Since(due)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				r.ok++
				r.admitted = append(r.admitted, took)
			case errors.Is(err, agency.ErrLimited):
				r.limited++
				r.rejectLatency = append(r.rejectLatency, took)
			case errors.Is(err, agency.ErrCircuitOpen):
				r.open++
				r.rejectLatency = append(r.rejectLatency, took)
			case errors.Is(err, agency.ErrPoolExhausted):
				r.exhausted++
			default:
				r.failed++
				if r.firstErr == nil {
					r.firstErr = err
				}
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Duration(total) * interval
	slices.Sort(r.admitted)
	slices.Sort(r.rejectLatency)
	return r
}

func printOverload(rows []overloadResult) {
	if len(rows) == 0 {
		return
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "client\toffered/s\tgoodput/s\tgoodput÷(S/L)\tadmitted p50\tadmitted p99\tp99/p50\trejected\treject p99\terrors\t")
	for _, r := range rows {
		ratio := 0.0
		if p50 := pct(r.admitted, 0.5); p50 > 0 {
			ratio = float64(pct(r.admitted, 0.99)) / float64(p50)
		}
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.3f\t%v\t%v\t%.2f\t%d\t%v\t%d\t\n", r.name, r.offered, r.goodput(), r.goodput()/r.bound,
			pct(r.admitted, 0.5).Round(100*time.Microsecond), pct(r.admitted, 0.99).Round(100*time.Microsecond), ratio,
			r.limited+r.open+r.exhausted, pct(r.rejectLatency, 0.99).Round(10*time.Microsecond), r.failed)
	}
	w.Flush()
	for _, r := range rows {
		if r.firstErr != nil {
			fmt.Printf("%s: first error: %v\n", r.name, r.firstErr)
		}
	}
}
