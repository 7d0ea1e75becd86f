package router

import (
	"errors"
	"net/http"
	"time"

	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/problem"
)

// keyring is the keys in use, their clients' token buckets and their
// lane refusals, swapped whole by SetKeys: a request authenticates and
// takes its token from the one it loaded, so a Client always indexes its
// own keys' buckets.
type keyring struct {
	keys     *apikey.Keys
	limits   *apikey.Limits
	refusals []prob // by Client.Index: 403 for a priority the client may not use
}

func newKeyring(old *keyring, k *apikey.Keys, now func() time.Time) *keyring {
	kr := &keyring{keys: k, refusals: make([]prob, len(k.Clients()))}
	if old != nil {
		kr.limits = old.limits.For(k, now)
	} else {
		kr.limits = apikey.NewLimits(k, now)
	}
	for i, c := range k.Clients() {
		kr.refusals[i] = newProb(problem.New(http.StatusForbidden, problem.LaneForbidden,
			"this API key may send only priority "+c.Lanes().Allowed()+" (its client's lanes)").WithField("priority"))
	}
	return kr
}

// ring is the keyring in use: one atomic load per request, no lock.
func (r *Router) ring() *keyring { return r.keyring.Load() }

// Keys returns the keys in use.
func (r *Router) Keys() *apikey.Keys { return r.ring().keys }

// SetKeys replaces the API keys, for the requests that follow, on every
// connection (a request is authenticated on its own, kept-alive connection
// or not): a key k lacks is refused from the next request on. A client in
// both keeps its rate-limit bucket, and the tokens in it, under its new
// limits; a client k lacks loses its bucket. It refuses nil or empty keys.
func (r *Router) SetKeys(k *apikey.Keys) error {
	if k == nil || len(k.Clients()) == 0 {
		return errors.New("router: no API keys")
	}
	r.keysMu.Lock()
	defer r.keysMu.Unlock()
	old := r.ring()
	r.metrics.addClients(k)
	r.keyring.Store(newKeyring(old, k, r.now))
	kept := make(map[string]bool, len(k.Clients()))
	for _, c := range k.Clients() {
		kept[c.ID] = true
	}
	removed := 0
	for _, c := range old.keys.Clients() {
		if !kept[c.ID] {
			removed++
			r.metrics.limited.DeleteLabelValues(c.ID)
		}
	}
	r.log.Info("API keys replaced", "clients", len(k.Clients()), "keys", k.Len(),
		"clients_removed", removed)
	return nil
}
