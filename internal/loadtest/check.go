package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"text/tabwriter"
	"time"
)

// Assertion is one checked promise with its measured value.
type Assertion struct {
	Name     string `json:"name"`
	Measured string `json:"measured"`
	Want     string `json:"want"`
	Pass     bool   `json:"pass"`
}

// DrillReport is a drill's verdict.
type DrillReport struct {
	Name       string      `json:"name"`
	Pass       bool        `json:"pass"`
	Assertions []Assertion `json:"assertions"`
	Notes      []string    `json:"notes,omitempty"`
}

func (d *DrillReport) check(name string, pass bool, measured, want string) {
	d.Assertions = append(d.Assertions, Assertion{Name: name, Measured: measured, Want: want, Pass: pass})
}

func (d *DrillReport) note(format string, args ...any) {
	d.Notes = append(d.Notes, fmt.Sprintf(format, args...))
}

func (d *DrillReport) finish() {
	d.Pass = len(d.Assertions) > 0
	for _, a := range d.Assertions {
		d.Pass = d.Pass && a.Pass
	}
}

// WriteText writes the assertions as a table.
func (d *DrillReport) WriteText(w io.Writer) {
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

// window selects samples by intended send time and user.
type window struct {
	from, to time.Duration // [from, to)
	users    func(u int) bool
}

// Stats are the outcomes of a set of samples.
type Stats struct {
	N, OK, Errors, Timeouts int
	Status                  map[string]int
	P50, P99                time.Duration
	NoRetryAfter            int // 503s without Retry-After
}

func stats(samples []Sample, w window) Stats {
	st := Stats{Status: map[string]int{}}
	var lat []time.Duration
	for _, s := range samples {
		if s.At < w.from || s.At >= w.to || (w.users != nil && !w.users(s.User)) {
			continue
		}
		st.N++
		st.Status[StatusKey(s)]++
		lat = append(lat, s.Latency)
		switch {
		case s.Status == http.StatusAccepted:
			st.OK++
		case s.Err == "timeout":
			st.Timeouts++
			st.Errors++
		default:
			st.Errors++
		}
		if s.Status == http.StatusServiceUnavailable && !s.RetryAfter {
			st.NoRetryAfter++
		}
	}
	slices.Sort(lat)
	st.P50, st.P99 = quantile(lat, 0.50), quantile(lat, 0.99)
	return st
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// userCells maps each user to the cell that answered it in [from, to).
func userCells(samples []Sample, from, to time.Duration) map[int]string {
	m := map[int]string{}
	for _, s := range samples {
		if s.At >= from && s.At < to && s.Cell != "" {
			m[s.User] = s.Cell
		}
	}
	return m
}

func msf(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// Verdict is what polling the accepted ids found.
type Verdict struct {
	Accepted, Done, Failed int
	Lost                   int // 404: accepted but unknown
	Unfinished             int // still pending at the deadline
	Changed                int // final result differs between two polls
	Replayed, ReplayNewID  int // re-POSTs with the same Idempotency-Key; of them answered with another id
}

// verify polls every accepted id (GET /v1/inquiries/{id} through the
// router) until it is done or failed or within passes, then polls the final
// ones once more and compares; then re-sends up to replays of the accepted
// requests with their Idempotency-Key and checks the same id comes back.
func verify(ctx context.Context, hc *http.Client, target, key string, samples []Sample, within time.Duration, replays int, progress io.Writer) Verdict {
	var acc []Sample
	for _, s := range samples {
		if s.ID != "" {
			acc = append(acc, s)
		}
	}
	v := Verdict{Accepted: len(acc)}
	type outcome struct {
		status string
		final  string
	}
	res := make([]outcome, len(acc))
	deadline := time.Now().Add(within)
	parallel(len(acc), 32, func(i int) {
		for {
			st, body := getInquiry(ctx, hc, target, key, acc[i].ID)
			if st == "done" || st == "failed" || st == "404" {
				res[i] = outcome{st, body}
				return
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				res[i] = outcome{"pending", ""}
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	var mu sync.Mutex
	parallel(len(acc), 32, func(i int) {
		if res[i].status != "done" && res[i].status != "failed" {
			return
		}
		st, body := getInquiry(ctx, hc, target, key, acc[i].ID)
		if st != "" && body != res[i].final {
			mu.Lock()
			v.Changed++
			mu.Unlock()
		}
	})
	for _, o := range res {
		switch o.status {
		case "done":
			v.Done++
		case "failed":
			v.Failed++
		case "404":
			v.Lost++
		default:
			v.Unfinished++
		}
	}
	// Replays, spread over the run.
	stepN := max(1, len(acc)/max(replays, 1))
	var pick []Sample
	for i := 0; i < len(acc) && len(pick) < replays; i += stepN {
		pick = append(pick, acc[i])
	}
	parallel(len(pick), 16, func(i int) {
		s := pick[i]
		var st int
		var body []byte
		for try := range 10 {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			var err error
			st, _, body, err = post(c, hc, target, key, s.Key, Body(s.User, s.Seq))
			cancel()
			if err == nil && st == http.StatusAccepted {
				break
			}
			time.Sleep(time.Duration(try+1) * 100 * time.Millisecond)
		}
		if st != http.StatusAccepted {
			return
		}
		var a struct {
			ID string `json:"id"`
		}
		json.Unmarshal(body, &a)
		mu.Lock()
		v.Replayed++
		if a.ID != s.ID {
			v.ReplayNewID++
		}
		mu.Unlock()
	})
	if progress != nil {
		fmt.Fprintf(progress, "verified %d accepted ids: %d done, %d failed, %d lost, %d unfinished, %d changed; %d replays, %d with a new id\n",
			v.Accepted, v.Done, v.Failed, v.Lost, v.Unfinished, v.Changed, v.Replayed, v.ReplayNewID)
	}
	return v
}

// checkVerdict adds the lost and duplicated assertions.
func (d *DrillReport) checkVerdict(v Verdict) {
	d.check("accepted ids lost (404 or never final)", v.Lost+v.Unfinished == 0,
		fmt.Sprintf("%d of %d (%d done, %d failed)", v.Lost+v.Unfinished, v.Accepted, v.Done, v.Failed), "0")
	d.check("accepted ids duplicated", v.Changed+v.ReplayNewID == 0,
		fmt.Sprintf("%d (result changed %d; new id on replay %d of %d)", v.Changed+v.ReplayNewID, v.Changed, v.ReplayNewID, v.Replayed), "0")
}

// getInquiry returns the inquiry's status ("404" when unknown, "" when it
// could not be read in a few tries: 429, 5xx, transport errors) and its
// status, result and reason.
func getInquiry(ctx context.Context, hc *http.Client, target, key, id string) (string, string) {
	for try := range 10 {
		if st, body := getInquiryOnce(ctx, hc, target, key, id); st != "" {
			return st, body
		}
		select {
		case <-ctx.Done():
			return "", ""
		case <-time.After(time.Duration(try+1) * 100 * time.Millisecond):
		}
	}
	return "", ""
}

func getInquiryOnce(ctx context.Context, hc *http.Client, target, key, id string) (string, string) {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(c, http.MethodGet, target+"/v1/inquiries/"+id, nil)
	if err != nil {
		return "", ""
	}
	req.Header.Set("X-API-Key", key)
	resp, err := hc.Do(req)
	if err != nil {
		return "", ""
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return "404", ""
	}
	if resp.StatusCode != http.StatusOK {
		return "", ""
	}
	var rec struct {
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
		Reason string          `json:"reason"`
	}
	b, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(b, &rec) != nil {
		return "", ""
	}
	return rec.Status, rec.Status + " " + string(rec.Result) + " " + rec.Reason
}

// parallel runs f(0..n-1) on up to k goroutines.
func parallel(n, k int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(n, k) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
