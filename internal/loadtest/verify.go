package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/cellkit/cellkit/internal/api"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Verification is what polling the accepted ids found.
type Verification struct {
	Accepted, Done, Failed int
	Lost                   int // 404: accepted but unknown
	Unfinished             int // still pending at the deadline
	Changed                int // final result differs between two polls
	Replayed, ReplayNewID  int // re-POSTs with the same Idempotency-Key; of them answered with another id
	// Examples are up to 5 ids lost or unfinished, each with the last
	// status read ("pending", "404", or "" for no answer).
	Examples []string `json:"examples,omitempty"`
	// Lanes tally the accepted ids by cell and the priority they asked
	// for, keyed "CELL/high" and "CELL/normal".
	Lanes map[string]*LaneTally `json:"lanes,omitempty"`
}

// LaneTally is the fate of one lane's accepted inquiries.
type LaneTally struct {
	Accepted, Done, Failed int
	// AgeP99 is the 99th percentile of the time from acceptance to the
	// end (done or failed), over the ones that ended.
	AgeP99 time.Duration
	ages   []time.Duration
}

// Verify polls every accepted id of samples (GET /v1/inquiries/{id} through
// the run's target, with its key and client) until it is done or failed or
// within passes, then polls the final ones once more and compares; then
// re-sends up to replays of the accepted requests with their
// Idempotency-Key and checks the same id comes back. It reports to the
// run's Progress.
// One piece: the three passes share the accepted samples, their outcomes and one deadline.
func (r *Runner) Verify(ctx context.Context, samples []Sample, within time.Duration, replays int) Verification {
	hc, target, key, progress := r.opts.Client, r.cfg.Target, r.cfg.Key, r.opts.Progress
	var acc []Sample
	for _, s := range samples {
		if s.ID != "" && !s.Read {
			acc = append(acc, s)
		}
	}
	v := Verification{Accepted: len(acc)}
	type outcome struct {
		status string
		final  string
		age    time.Duration
	}
	res := make([]outcome, len(acc))
	deadline := time.Now().Add(within)
	parallel(len(acc), 32, func(i int) {
		for {
			st, body, age := getInquiry(ctx, hc, target, key, acc[i].ID)
			if st == "done" || st == "failed" || st == "404" {
				res[i] = outcome{st, body, age}
				return
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				res[i] = outcome{"pending", st, 0}
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
		st, body, _ := getInquiry(ctx, hc, target, key, acc[i].ID)
		if st != "" && body != res[i].final {
			mu.Lock()
			v.Changed++
			mu.Unlock()
		}
	})
	v.Lanes = map[string]*LaneTally{}
	for i, o := range res {
		lane := acc[i].Cell + "/" + map[bool]string{true: "high", false: "normal"}[acc[i].High]
		lt := v.Lanes[lane]
		if lt == nil {
			lt = &LaneTally{}
			v.Lanes[lane] = lt
		}
		lt.Accepted++
		switch o.status {
		case "done":
			lt.Done++
			lt.ages = append(lt.ages, o.age)
		case "failed":
			lt.Failed++
			lt.ages = append(lt.ages, o.age)
		}
	}
	for _, lt := range v.Lanes {
		if len(lt.ages) > 0 {
			slices.Sort(lt.ages)
			lt.AgeP99 = lt.ages[min(len(lt.ages)-1, len(lt.ages)*99/100)]
		}
	}
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
	for i, o := range res {
		if (o.status == "404" || o.status == "pending") && len(v.Examples) < 5 {
			last := o.status
			if o.status == "pending" {
				last = "last read " + strconv.Quote(o.final)
			}
			v.Examples = append(v.Examples, acc[i].ID+" ("+last+")")
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
			st, _, body, err = post(c, hc, target, key, s.Key, Body(s.User, s.Seq, s.High))
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
		_ = json.Unmarshal(body, &a) // a body without an id counts as a new id below
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

// getInquiry returns the inquiry's status ("404" when unknown, "" when it
// could not be read in a few tries: 429, 5xx, transport errors), its
// status, result and reason, and, once it ended, the time from its
// acceptance to its end.
func getInquiry(ctx context.Context, hc *http.Client, target, key, id string) (string, string, time.Duration) {
	for try := range 10 {
		if st, body, age := getInquiryOnce(ctx, hc, target, key, id); st != "" {
			return st, body, age
		}
		select {
		case <-ctx.Done():
			return "", "", 0
		case <-time.After(time.Duration(try+1) * 100 * time.Millisecond):
		}
	}
	return "", "", 0
}

func getInquiryOnce(ctx context.Context, hc *http.Client, target, key, id string) (string, string, time.Duration) {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(c, http.MethodGet, target+api.PathInquiries+"/"+id, nil)
	if err != nil {
		return "", "", 0
	}
	req.Header.Set("X-API-Key", key)
	resp, err := hc.Do(req)
	if err != nil {
		return "", "", 0
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return "404", "", 0
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", 0
	}
	var rec struct {
		Status    string          `json:"status"`
		Result    json.RawMessage `json:"result"`
		Reason    string          `json:"reason"`
		Created   time.Time       `json:"created_at"`
		Completed *time.Time      `json:"completed_at"`
	}
	b, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(b, &rec) != nil {
		return "", "", 0
	}
	var age time.Duration
	if rec.Completed != nil {
		age = rec.Completed.Sub(rec.Created)
	}
	return rec.Status, rec.Status + " " + string(rec.Result) + " " + rec.Reason, age
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
