package quota

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
)

// Doc is one router's lease: what it holds of each client's quota and
// what it was asked, as it publishes them each round. A client it does
// not name is one it holds the even share of (1/Live), full, and was
// not asked for.
type Doc struct {
	Router string `json:"router"`
	// Seq grows with every write: the others see the router alive while
	// it changes.
	Seq uint64 `json:"seq"`
	// Live is how many routers it counted, itself included.
	Live    int              `json:"live"`
	Clients map[string]Entry `json:"clients,omitempty"`
}

// Entry is a router's part of one client's quota.
type Entry struct {
	// Demand is the requests a second the router was asked for the client
	// (taken or not): its recent peak, decaying over the demand window.
	Demand float64 `json:"d"`
	// Share is the fraction of the client's rate and burst it holds.
	Share float64 `json:"s"`
	// Tokens is what its bucket holds, a fraction of the client's burst.
	Tokens float64 `json:"t"`
}

// maxRouters bounds Live: a document claiming more is not believed.
const maxRouters = 1000

// decodeDoc reads a router's document and checks it: a document another
// process wrote is believed only within bounds.
func decodeDoc(id string, data []byte) (Doc, error) {
	var d Doc
	if err := json.Unmarshal(data, &d); err != nil {
		return d, err
	}
	return d, d.check(id)
}

// check says why d is not a document router id writes (nil: it is).
func (d *Doc) check(id string) error {
	switch {
	case d.Router != id:
		return fmt.Errorf("names router %q", d.Router)
	case d.Live < 1 || d.Live > maxRouters:
		return fmt.Errorf("live %d, want 1 to %d", d.Live, maxRouters)
	case len(d.Clients) > apikey.MaxClients:
		return fmt.Errorf("%d clients, over %d", len(d.Clients), apikey.MaxClients)
	}
	for c, e := range d.Clients {
		if !api.ValidClientID(c) {
			return fmt.Errorf("client %.80q", c)
		}
		if !fraction(e.Share) || !fraction(e.Tokens) || !(e.Demand >= 0) || math.IsInf(e.Demand, 0) {
			return fmt.Errorf("client %s: %+v, want shares and tokens in [0, 1] and a demand ≥ 0", c, e)
		}
	}
	return nil
}

func fraction(f float64) bool { return f >= 0 && f <= 1 }

// entry is what d says of client: its entry, or the even share, full.
func (d *Doc) entry(client string) Entry {
	if e, ok := d.Clients[client]; ok {
		return e
	}
	even := 1 / float64(d.Live)
	return Entry{Share: even, Tokens: even}
}

// errNoRouter is New's answer without a router id.
var errNoRouter = errors.New("quota: the router's id is required")

// quietDemand is the demand below which a client counts as not asked for.
const quietDemand = 0.01

// omit says whether e need not be written: the even share of live
// routers, full, not asked for.
func omit(e Entry, live int) bool {
	even := 1 / float64(live)
	return e.Demand < quietDemand && math.Abs(e.Share-even) < 1e-9 && e.Tokens >= even-1e-9
}
