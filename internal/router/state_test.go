package router

import "testing"

// TestTransitionsTable: closed is final, every state can close, and every
// state but closed is reached from the one a connection opens in.
func TestTransitionsTable(t *testing.T) {
	for s := range nStates {
		if transitions[stClosed][s] {
			t.Errorf("closed → %v: closed must be final", s)
		}
		if s != stClosed && !transitions[s][stClosed] {
			t.Errorf("%v cannot close", s)
		}
	}
	seen := map[connState]bool{stHead: true}
	for next := []connState{stHead}; len(next) > 0; {
		s := next[0]
		next = next[1:]
		for to := range nStates {
			if transitions[s][to] && !seen[to] {
				seen[to] = true
				next = append(next, to)
			}
		}
	}
	for s := range nStates {
		if !seen[s] {
			t.Errorf("%v is never reached", s)
		}
	}
}
