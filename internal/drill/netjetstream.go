package drill

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A cell's JetStream cluster as the network drills see it: its streams'
// leaders, their election after a loss, and replicas catching up.

// caughtUp waits until every stream of the cell's JetStream has all its
// replicas current, and says how long it took.
func (n *netRun) caughtUp(ctx context.Context, cell string, within time.Duration) (time.Duration, error) {
	nc, js, err := n.cellJetStream(cell, "")
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	t0 := time.Now()
	var last string
	for time.Since(t0) < within {
		last = ""
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		streams := js.ListStreams(lctx)
		count := 0
		for si := range streams.Info() {
			count++
			if si.Cluster == nil {
				continue
			}
			if si.Cluster.Leader == "" {
				last = si.Config.Name + " has no leader"
			}
			for _, p := range si.Cluster.Replicas {
				if !p.Current || p.Offline {
					last = fmt.Sprintf("%s: replica %s not current (lag %d)", si.Config.Name, p.Name, p.Lag)
				}
			}
			if len(si.Cluster.Replicas)+1 < si.Config.Replicas {
				last = fmt.Sprintf("%s: %d of %d replicas", si.Config.Name, len(si.Cluster.Replicas)+1, si.Config.Replicas)
			}
		}
		if err := streams.Err(); err != nil {
			last = err.Error()
		}
		cancel()
		if last == "" && count > 0 {
			return time.Since(t0), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("not within %v: %s", within, last)
}

// cellJetStream connects to the JetStream nodes of cell but the one named
// skip.
func (n *netRun) cellJetStream(cell, skip string) (*nats.Conn, jetstream.JetStream, error) {
	tok, err := os.ReadFile(n.st.NATSTokenFile)
	if err != nil {
		return nil, nil, err
	}
	var urls []string
	for _, p := range n.st.Processes {
		if p.Addrs["cell"] == cell && p.Addrs["nats"] != "" && p.Name != skip {
			urls = append(urls, "nats://"+p.Addrs["nats"])
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Token(strings.TrimSpace(string(tok))), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// streamLeaders are the leaders of the cell's streams (and buckets), by
// stream name ("" for one without a leader).
func streamLeaders(ctx context.Context, js jetstream.JetStream) (map[string]string, error) {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out := map[string]string{}
	streams := js.ListStreams(lctx)
	for si := range streams.Info() {
		if si.Cluster != nil {
			out[si.Config.Name] = si.Cluster.Leader
		}
	}
	return out, streams.Err()
}

// watchElection polls the leaders of the cell's streams from the nodes but
// lost, from the run's time from, until none is led by lost: it returns
// when (on the run's clock) every stream had a leader again, or -1.
func (n *netRun) watchElection(ctx context.Context, cell, lost string, within time.Duration) (time.Duration, error) {
	nc, js, err := n.cellJetStream(cell, lost)
	if err != nil {
		return -1, err
	}
	defer nc.Close()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if leaders, err := streamLeaders(ctx, js); err == nil && len(leaders) > 0 {
			led := true
			for _, l := range leaders {
				if l == "" || l == lost {
					led = false
				}
			}
			if led {
				return n.r.Elapsed(), nil
			}
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return -1, fmt.Errorf("the cell's streams had no leader again within %v", within)
}
