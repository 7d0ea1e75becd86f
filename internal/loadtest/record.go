package loadtest

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds, 1 µs to 5 minutes.
const (
	hdrMin = 1
	hdrMax = int64(5 * time.Minute / time.Microsecond)
)

// NoCell labels answers without a Cellkit-Cell header (transport errors,
// the router's own refusals).
const NoCell = "-"

// recorder collects the outcomes: HDR histograms overall and per cell,
// status counts, per-second series, and optionally every sample.
type recorder struct {
	mu      sync.Mutex
	all     *hdr.Histogram
	cells   map[string]*cellRec
	seconds map[int]map[string]*secRec
	statusN map[string]int
	keep    bool
	samples []Sample
	n, ok   int
	lastSec *hdr.Histogram // for the progress line
}

type cellRec struct {
	h      *hdr.Histogram
	status map[string]int
}

type secRec struct {
	h      *hdr.Histogram
	n, err int
}

func newRecorder(keep bool) *recorder {
	return &recorder{
		all: hdr.New(hdrMin, hdrMax, 3), cells: map[string]*cellRec{}, seconds: map[int]map[string]*secRec{},
		statusN: map[string]int{}, keep: keep, lastSec: hdr.New(hdrMin, hdrMax, 2),
	}
}

// StatusKey names a sample's outcome: the HTTP status, or "timeout" or
// "error" when there was no answer.
func StatusKey(s Sample) string {
	switch {
	case s.Status != 0:
		return strconv.Itoa(s.Status)
	case s.Err == "timeout":
		return "timeout"
	default:
		return "error"
	}
}

func us(d time.Duration) int64 { return min(max(d.Microseconds(), hdrMin), hdrMax) }

func (r *recorder) record(s Sample) {
	v := us(s.Latency)
	cell := s.Cell
	if cell == "" {
		cell = NoCell
	}
	key := StatusKey(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	if s.OK() {
		r.ok++
	}
	r.all.RecordValue(v)
	r.lastSec.RecordValue(v)
	c := r.cells[cell]
	if c == nil {
		c = &cellRec{h: hdr.New(hdrMin, hdrMax, 3), status: map[string]int{}}
		r.cells[cell] = c
	}
	c.h.RecordValue(v)
	c.status[key]++
	r.statusN[key]++
	sec := int(s.At / time.Second)
	m := r.seconds[sec]
	if m == nil {
		m = map[string]*secRec{}
		r.seconds[sec] = m
	}
	sr := m[cell]
	if sr == nil {
		sr = &secRec{h: hdr.New(hdrMin, hdrMax, 2)}
		m[cell] = sr
	}
	sr.h.RecordValue(v)
	sr.n++
	if !s.OK() {
		sr.err++
	}
	if r.keep {
		r.samples = append(r.samples, s)
	}
}

// progress is the live line: totals, then the last second's latency.
func (r *recorder) progress(el time.Duration, inflight int64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	p50, p99 := ms(r.lastSec.ValueAtQuantile(50)), ms(r.lastSec.ValueAtQuantile(99))
	line := fmt.Sprintf("%5.0fs  done %d  202 %d  other %d  in flight %d  last 1s: n %d p50 %.1fms p99 %.1fms",
		el.Seconds(), r.n, r.ok, r.n-r.ok, inflight, r.lastSec.TotalCount(), p50, p99)
	r.lastSec.Reset()
	return line
}

func ms(v int64) float64 { return float64(v) / 1000 }

// Latency summarises a histogram, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

func summarize(h *hdr.Histogram) Latency {
	return Latency{Count: h.TotalCount(), P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)),
		P99: ms(h.ValueAtQuantile(99)), P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max())}
}

// CellResult is one cell's part of a run.
type CellResult struct {
	Latency
	Status map[string]int `json:"status"`
}

// Point is one second of one cell on the chart.
type Point struct {
	N       int64   `json:"n"`
	P50     float64 `json:"p50_ms"`
	P99     float64 `json:"p99_ms"`
	ErrRate float64 `json:"error_rate"` // answers other than 202, 0..1
}

// Result is a run's report. MaxLag is the latest a request was sent after
// its intended time, in ms: the load generator's own delay (a request that
// waited for a free sender counts the wait too).
type Result struct {
	Target   string                 `json:"target"`
	Steps    []StepJSON             `json:"steps"`
	Users    int                    `json:"users"`
	Zipf     float64                `json:"zipf,omitempty"`
	Duration float64                `json:"duration_s"`
	Planned  int                    `json:"planned"`
	Sent     int                    `json:"sent"`
	MaxLag   float64                `json:"max_send_lag_ms"`
	Status   map[string]int         `json:"status"`
	Overall  Latency                `json:"overall"`
	Cells    map[string]*CellResult `json:"cells"`
	// Series[i] is second i: cell → point.
	Series  []map[string]Point `json:"series"`
	Events  []Event            `json:"events,omitempty"`
	Samples []Sample           `json:"-"`
	Drill   *Verdict           `json:"drill,omitempty"` // the verdict of the drill that ran the load
}

// StepJSON is a step in the report.
type StepJSON struct {
	Rate float64 `json:"rate"`
	For  string  `json:"for"`
}

func (r *recorder) result(cfg Config, total time.Duration, events []Event) *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{Target: cfg.Target, Users: cfg.Users, Zipf: cfg.Zipf, Duration: total.Seconds(),
		Status: r.statusN, Overall: summarize(r.all), Cells: map[string]*CellResult{}, Events: events, Samples: r.samples}
	for _, s := range cfg.Steps {
		res.Steps = append(res.Steps, StepJSON{Rate: s.Rate, For: s.For.String()})
	}
	for name, c := range r.cells {
		res.Cells[name] = &CellResult{Latency: summarize(c.h), Status: c.status}
	}
	last := -1
	for s := range r.seconds {
		last = max(last, s)
	}
	for s := 0; s <= last; s++ {
		m := map[string]Point{}
		for cell, sr := range r.seconds[s] {
			m[cell] = Point{N: sr.h.TotalCount(), P50: ms(sr.h.ValueAtQuantile(50)), P99: ms(sr.h.ValueAtQuantile(99)),
				ErrRate: float64(sr.err) / float64(max(sr.n, 1))}
		}
		res.Series = append(res.Series, m)
	}
	slices.SortFunc(res.Samples, func(a, b Sample) int { return a.Seq - b.Seq })
	return res
}

// CellNames are the cells of a result, sorted, NoCell last.
func (res *Result) CellNames() []string {
	var names []string
	for n := range res.Cells {
		if n != NoCell {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, compareCells)
	if _, ok := res.Cells[NoCell]; ok {
		names = append(names, NoCell)
	}
	return names
}

// compareCells orders c2 before c10.
func compareCells(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}
