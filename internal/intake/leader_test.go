package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/cellkit/cellkit/internal/testkit"
)

// While the cell's streams have no leader, new inquiries wait for the
// next one instead of failing: two of the three nodes go (the quorum with
// them) for 3 s while POSTs go on, then one comes back. Every POST is
// accepted, many after a wait, and every accepted inquiry has its record
// and its record's job queued, once (a try that timed out may have left a
// message of its own job, which is stale).
func TestNewInquiriesWaitOutAnElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node JetStream cluster and an election")
	}
	e := newClusterEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	logs := &testkit.Buffer{}
	c := e.cell(cellOpts{queue: queue.Config{Replicas: 3}, now: time.Now, logs: logs,
		intake: Config{LeaderWait: 30 * time.Second, TryTimeout: 750 * time.Millisecond}})
	// 40 POSTs a second for 6 s; at 1 s nodes 1 and 2 go, at 4 s node 1
	// comes back.
	const posts, every = 240, 25 * time.Millisecond
	var mu sync.Mutex
	statuses := map[int]int{}
	var accepted []string
	var wg sync.WaitGroup
	for i := range posts {
		switch i {
		case 40:
			t.Log("shutting down nodes 1 and 2: no quorum, no leader")
			e.nodes[1].Shutdown()
			e.nodes[2].Shutdown()
		case 150:
			// Inquiries have waited for a leader for over a second: the
			// health check says so, at once
			// (an answer later than the routers' check timeout would
			// be taken for a hang).
			t0 := time.Now()
			r, err := testkit.Send(c.client, "GET", c.url+"/v1/health", nil, nil)
			if took := time.Since(t0); err != nil || r.Status != http.StatusServiceUnavailable || took > 100*time.Millisecond {
				t.Errorf("health without a leader: %v %d %s after %v; want 503 within 100ms", err, r.Status, r.Body, took)
			}
		case 160:
			t.Log("node 1 back")
			e.restartNode(1)
		}
		wg.Go(func() {
			r, err := testkit.Send(c.client, "POST", c.url+"/v1/inquiries", request(fmt.Sprintf("u-%d", i)), nil)
			var a Accepted
			if err == nil && r.Status == http.StatusAccepted {
				err = json.Unmarshal(r.Body, &a)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				statuses[-1]++ // no answer
				t.Errorf("POST %d: %v", i, err)
			case r.Status == http.StatusAccepted:
				accepted = append(accepted, a.ID)
				fallthrough
			default:
				statuses[r.Status]++
				if r.Status != http.StatusAccepted && statuses[r.Status] == 1 {
					t.Logf("POST %d: %d %s", i, r.Status, r.Body)
				}
			}
		})
		time.Sleep(every)
	}
	wg.Wait()
	if statuses[http.StatusAccepted] != posts {
		t.Fatalf("answers %v; want all %d accepted through the election; the cell's warnings:\n%s", statuses, posts, warnings(logs.String()))
	}
	testkit.WaitFor(t, 10*time.Second, "the health check ok again", func() bool {
		r, err := testkit.Send(c.client, "GET", c.url+"/v1/health", nil, nil)
		return err == nil && r.Status == http.StatusOK
	})
	waited := testutil.ToFloat64(c.h.m.leaderWaits)
	t.Logf("%v inquiries waited for a leader", waited)
	if waited < 20 || waited > posts {
		t.Errorf("%v inquiries waited for a leader, want most of the 120 sent in the 3 s without one (each counted once)", waited)
	}

	// Every accepted inquiry: its record, and its job among the accepted
	// work exactly once (read from the ledger by sequence: a consumer's
	// fetch may find nothing while its leader is elected).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	work, err := c.js.Stream(ctx, store.LedgerStream("c1"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := work.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		// Right after the election the stream may still answer "JetStream
		// system temporarily unavailable" for a moment: read again.
		var m *jetstream.RawStreamMsg
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("message %d readable", seq), func() bool {
			m, err = work.GetMsg(ctx, seq)
			return err == nil || errors.Is(err, jetstream.ErrMsgNotFound)
		})
		if err != nil {
			continue // no such message (removed)
		}
		if !strings.HasPrefix(m.Subject, ledgerWrites) {
			continue // a later state
		}
		var rec inquiry.Record
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			t.Fatal(err)
		}
		jobs[rec.ID+"/"+rec.Job]++
	}
	var missing []string
	for _, id := range accepted {
		rec, _, ok := c.record(t, id)
		if !ok || rec.Status != inquiry.Pending {
			missing = append(missing, id+": no pending record")
			continue
		}
		if n := jobs[id+"/"+rec.Job]; n != 1 {
			missing = append(missing, fmt.Sprintf("%s: its job queued %d times", id, n))
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d accepted inquiries lack their record or message:\n%s", len(missing), len(accepted), strings.Join(missing, "\n"))
	}
}

// warnings are a log's lines at WARN and ERROR.
func warnings(log string) string {
	var b strings.Builder
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, " level=WARN ") || strings.Contains(line, " level=ERROR ") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
