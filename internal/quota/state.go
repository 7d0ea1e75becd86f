package quota

import (
	"fmt"
	"time"

	"github.com/cellkit/cellkit/internal/apikey"
)

// State is what a router hands its successor of its quota sharing (the
// router's handoff): the successor holds the same lease, so a restart
// gives no client a fresh burst.
type State struct {
	Seq     uint64           `json:"seq"`
	LeaseAt time.Time        `json:"lease_at"`
	Live    int              `json:"live"`
	Clients map[string]Entry `json:"clients,omitempty"` // demand, share held, tokens now
}

// State returns the sharer's state, its buckets' tokens as of now.
func (s *Sharer) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{Seq: s.seq, LeaseAt: s.leaseAt, Live: s.live, Clients: make(map[string]Entry, len(s.clients))}
	tokens := map[string]float64{}
	for _, u := range s.buckets.Usage() {
		tokens[u.Client.ID] = u.Tokens
	}
	for id, c := range s.clients {
		st.Clients[id] = Entry{Demand: c.demand, Share: c.held, Tokens: min(tokens[id], c.held)}
	}
	return st
}

// Check says why st is not a state a router hands over (nil: it is).
func (st State) Check(now time.Time) error {
	if st.LeaseAt.After(now.Add(time.Minute)) {
		return fmt.Errorf("quota lease written at %s, in the future", st.LeaseAt.Format(time.RFC3339))
	}
	d := Doc{Router: "handoff", Seq: st.Seq, Live: st.Live, Clients: st.Clients}
	if err := d.check(d.Router); err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	return nil
}

// Resume takes a predecessor's state over, before Run: its shares, its
// buckets' tokens (never more than the buckets hold now) and its lease.
func (s *Sharer) Resume(st State) error {
	if err := st.Check(s.now()); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Past the predecessor's writes while both run.
	s.seq = max(s.seq, st.Seq+resumeSeqGap)
	s.leaseAt, s.live, s.reached = st.LeaseAt, st.Live, true
	if !st.LeaseAt.IsZero() {
		s.leaseNs.Store(st.LeaseAt.UnixNano())
	}
	shares := make([]apikey.Share, 0, len(st.Clients))
	for id, e := range st.Clients {
		c := &clientState{demand: e.Demand, held: e.Share, tokens: e.Tokens}
		s.clients[id] = c
		shares = append(shares, s.shareOf(id, c))
	}
	s.buckets.SetShares(shares)
	for id, e := range st.Clients {
		s.buckets.SetTokens(id, e.Tokens)
	}
	return nil
}

// resumeSeqGap separates a successor's lease sequence from its
// predecessor's, which may write a few more rounds before it stops.
const resumeSeqGap = 1 << 20
