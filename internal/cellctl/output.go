package cellctl

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cellkit/cellkit/internal/control"
)

// table writes aligned columns; rows are tab-separated, the last column is
// not padded (no trailing spaces).
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cols ...string) {
	for len(cols) > 1 && cols[len(cols)-1] == "" {
		cols = cols[:len(cols)-1]
	}
	fmt.Fprintln(t.tw, strings.Join(cols, "\t"))
}

func (t *table) flush() { t.tw.Flush() }

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// arrow renders before → after, or just the value when it did not change.
func arrow(before, after string) string {
	if before == after {
		return before
	}
	return before + " → " + after
}

func itoa(n int) string { return strconv.Itoa(n) }

// pct renders a share as a percentage with one decimal.
func pct(part, whole int) string {
	if whole == 0 {
		return "0.0%"
	}
	return strconv.FormatFloat(100*float64(part)/float64(whole), 'f', 1, 64) + "%"
}

// human renders a duration the way an operator reads it (control.HumanDuration).
func human(d time.Duration) string { return control.HumanDuration(d) }

// slotRange renders an inclusive slot range: "17" or "0-4095".
func slotRange(from, to int) string {
	if from == to {
		return itoa(from)
	}
	return itoa(from) + "-" + itoa(to)
}

// orNone renders an empty cell name.
func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
