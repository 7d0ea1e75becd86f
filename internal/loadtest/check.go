package loadtest

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Assertion is one checked promise with its measured value.
type Assertion struct {
	Name     string `json:"name"`
	Measured string `json:"measured"`
	Want     string `json:"want"`
	Pass     bool   `json:"pass"`
}

// Verdict is what a drill concluded from a run: its assertions and notes.
// It passes when it has assertions and every one holds.
type Verdict struct {
	Name       string      `json:"name"`
	Pass       bool        `json:"pass"`
	Assertions []Assertion `json:"assertions"`
	Notes      []string    `json:"notes,omitempty"`
}

// Check adds an assertion.
func (d *Verdict) Check(name string, pass bool, measured, want string) {
	d.Assertions = append(d.Assertions, Assertion{Name: name, Measured: measured, Want: want, Pass: pass})
}

// Note adds a line that informs without deciding.
func (d *Verdict) Note(format string, args ...any) {
	d.Notes = append(d.Notes, fmt.Sprintf(format, args...))
}

// Finish sets Pass from the assertions.
func (d *Verdict) Finish() {
	d.Pass = len(d.Assertions) > 0
	for _, a := range d.Assertions {
		d.Pass = d.Pass && a.Pass
	}
}

// CheckVerification adds the assertions on the accepted ids: none lost,
// none duplicated.
func (d *Verdict) CheckVerification(v Verification) {
	d.Check("accepted ids lost (404 or never final)", v.Lost+v.Unfinished == 0,
		fmt.Sprintf("%d of %d (%d done, %d failed)", v.Lost+v.Unfinished, v.Accepted, v.Done, v.Failed), "0")
	if len(v.Examples) > 0 {
		d.Note("lost or never final, e.g. %s", strings.Join(v.Examples, ", "))
	}
	d.Check("accepted ids duplicated", v.Changed+v.ReplayNewID == 0,
		fmt.Sprintf("%d (result changed %d; new id on replay %d of %d)", v.Changed+v.ReplayNewID, v.Changed, v.ReplayNewID, v.Replayed), "0")
}

// WriteText writes the assertions as a table.
func (d *Verdict) WriteText(w io.Writer) {
	fmt.Fprintf(w, "drill %s: %s\n", d.Name, map[bool]string{true: "PASS", false: "FAIL"}[d.Pass])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ASSERTION\tMEASURED\tWANT\tRESULT")
	for _, a := range d.Assertions {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", a.Name, a.Measured, a.Want, map[bool]string{true: "ok", false: "FAIL"}[a.Pass])
	}
	tw.Flush()
	for _, n := range d.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}
