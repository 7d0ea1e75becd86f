package loadtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cellkit/cellkit/internal/atomicfile"
)

// WriteText writes the run's table: overall and per cell, latency and
// status counts.
func WriteText(w io.Writer, res *Result) {
	fmt.Fprintf(w, "target %s, %d users%s, %.0fs planned, %d requests sent of %d planned, at most %.1fms after their intended time\n\n",
		res.Target, res.Users, zipfText(res.Zipf), res.Duration, res.Sent, res.Planned, res.MaxLag)
	codes := statusCodes(res.Status)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "CELL\tREQUESTS\tP50 ms\tP90 ms\tP99 ms\tP99.9 ms\tMAX ms\t%s\t\n", strings.Join(codes, "\t"))
	row := func(name string, l Latency, st map[string]int) {
		var cs []string
		for _, c := range codes {
			cs = append(cs, strconv.Itoa(st[c]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t\n", name, l.Count, l.P50, l.P90, l.P99, l.P999, l.Max, strings.Join(cs, "\t"))
	}
	for _, n := range res.CellNames() {
		c := res.Cells[n]
		row(n, c.Latency, c.Status)
	}
	row("all", res.Overall, res.Status)
	tw.Flush()
	if len(res.Events) > 0 {
		fmt.Fprintln(w, "\nevents:")
		for _, e := range res.Events {
			fmt.Fprintf(w, "  %6.1fs  %s\n", e.At.Seconds(), e.Name)
		}
	}
	if res.Drill != nil {
		fmt.Fprintln(w)
		res.Drill.WriteText(w)
	}
}

func zipfText(s float64) string {
	if s == 0 {
		return " (uniform)"
	}
	return fmt.Sprintf(" (zipf %g)", s)
}

// statusCodes lists the status keys, numeric first.
func statusCodes(m map[string]int) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b string) int {
		ai, aerr := strconv.Atoi(a)
		bi, berr := strconv.Atoi(b)
		switch {
		case aerr == nil && berr == nil:
			return ai - bi
		case aerr == nil:
			return -1
		case berr == nil:
			return 1
		}
		return strings.Compare(a, b)
	})
	return ks
}

// WriteJSONFile replaces the file at path with the report as JSON.
func WriteJSONFile(path string, res *Result) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteSVGFile replaces the file at path with the chart.
func WriteSVGFile(path string, res *Result) error {
	var b bytes.Buffer
	WriteSVG(&b, res)
	return atomicfile.WriteFile(path, b.Bytes(), 0o644)
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// WriteSVG draws, per second and per cell, p50 (dashed) and p99 (solid) on
// a log scale, and the error rate below, with the events as vertical lines.
func WriteSVG(w io.Writer, res *Result) {
	const (
		W, left, right = 960, 70, 110
		top, latH, gap = 40, 300, 50
		errH, bottom   = 140, 40
	)
	H := top + latH + gap + errH + bottom
	plotW := float64(W - left - right)
	n := max(len(res.Series), int(math.Ceil(res.Duration)), 1)
	x := func(sec float64) float64 { return left + plotW*sec/float64(n) }
	// Latency axis: log10 from 0.1 ms to the next decade above the max p99.
	maxMs := 1.0
	for _, m := range res.Series {
		for _, p := range m {
			maxMs = max(maxMs, p.P99)
		}
	}
	lo, hi := -1.0, math.Ceil(math.Log10(maxMs))
	yLat := func(v float64) float64 {
		l := math.Log10(max(v, 0.1))
		return top + latH - latH*(l-lo)/(hi-lo)
	}
	errTop := float64(top + latH + gap)
	yErr := func(r float64) float64 { return errTop + errH - errH*r }

	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", W, H)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("%s — %d requests, %d users", res.Target, res.Sent, res.Users)
	if res.Drill != nil {
		title = "drill " + res.Drill.Name + " — " + map[bool]string{true: "PASS", false: "FAIL"}[res.Drill.Pass] + " — " + title
	}
	fmt.Fprintf(w, `<text x="%d" y="20" font-size="14">%s</text>`+"\n", left, xmlEscape(title))
	// Axes and grid.
	for d := lo; d <= hi; d++ {
		y := yLat(math.Pow(10, d))
		fmt.Fprintf(w, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, x(float64(n)), y, y, left-5, y+4, msLabel(math.Pow(10, d)))
	}
	fmt.Fprintf(w, `<text x="12" y="%d" transform="rotate(-90 12 %d)">latency (p99 solid, p50 dashed)</text>`+"\n", top+latH-40, top+latH-40)
	for _, r := range []float64{0, 0.5, 1} {
		y := yErr(r)
		fmt.Fprintf(w, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.0f%%</text>`+"\n",
			left, x(float64(n)), y, y, left-5, y+4, r*100)
	}
	fmt.Fprintf(w, `<text x="12" y="%.0f" transform="rotate(-90 12 %.0f)">error rate</text>`+"\n", errTop+errH-20, errTop+errH-20)
	step := max(1, n/20)
	for s := 0; s <= n; s += step {
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle">%ds</text>`+"\n", x(float64(s)), H-bottom+18, s)
	}
	// Series.
	for i, cell := range res.CellNames() {
		color := palette[i%len(palette)]
		var p50, p99, er []string
		for s, m := range res.Series {
			p, ok := m[cell]
			if !ok {
				continue
			}
			cx := x(float64(s) + 0.5)
			p50 = append(p50, fmt.Sprintf("%.1f,%.1f", cx, yLat(p.P50)))
			p99 = append(p99, fmt.Sprintf("%.1f,%.1f", cx, yLat(p.P99)))
			er = append(er, fmt.Sprintf("%.1f,%.1f", cx, yErr(p.ErrRate)))
		}
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, strings.Join(p99, " "))
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-dasharray="4 3" points="%s"/>`+"\n", color, strings.Join(p50, " "))
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, strings.Join(er, " "))
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="12" height="3" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			W-right+15, top+10+16*i, color, W-right+32, top+14+16*i, xmlEscape(cell))
	}
	// Events.
	for i, e := range res.Events {
		ex := x(e.At.Seconds())
		fmt.Fprintf(w, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.0f" stroke="#c00" stroke-dasharray="2 2"/>`+"\n", ex, ex, top, errTop+errH)
		fmt.Fprintf(w, `<text x="%.1f" y="%d" fill="#c00">%s</text>`+"\n", ex+3, top+12+12*(i%4), xmlEscape(e.Name))
	}
	fmt.Fprintln(w, "</svg>")
}

func msLabel(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'g', -1, 64) + "s"
	}
	return strconv.FormatFloat(v, 'g', -1, 64) + "ms"
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
