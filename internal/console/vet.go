package console

import (
	"encoding/json"
	"fmt"
)

// vet drops from the cards every value that is not a finite number
// (whatever field it came in), naming each on its card, which turns
// amber for it; and lists the admin endpoints the console did not ask.
func (c *collector) vet(v *View) {
	for i := range v.Cells {
		card := &v.Cells[i]
		if bad := dropNonFinite(card); len(bad) > 0 {
			card.Health, card.Why = warnBad(card.Health, card.Why, card.Bad, bad)
			card.Bad = append(card.Bad, bad...)
		}
		if card.Untrusted && len(card.Instances) == 0 {
			v.Refused = append(v.Refused, RefusedAdmin{What: card.ID, Admin: card.Admin, Why: card.Error})
		}
		for _, in := range card.Instances {
			if in.Untrusted {
				v.Refused = append(v.Refused, RefusedAdmin{What: card.ID + "/" + in.ID, Admin: in.Admin, Why: in.Error})
			}
		}
	}
	for i := range v.Routers {
		card := &v.Routers[i]
		if bad := dropNonFinite(card); len(bad) > 0 {
			card.Health, card.Why = warnBad(card.Health, card.Why, card.Bad, bad)
			card.Bad = append(card.Bad, bad...)
		}
		if card.Untrusted {
			v.Refused = append(v.Refused, RefusedAdmin{What: "router " + card.ID, Admin: card.Admin, Why: card.Error})
		}
	}
}

// warnBad is a card's health and why once more bad values were dropped
// from it: a green or grey card turns amber, saying so (once).
func warnBad(h Health, why string, had, bad []string) (Health, string) {
	if h == HealthDown || len(had) > 0 {
		return h, why // said already, or red for worse
	}
	w := badWhy(bad)
	if why != "" && why != "drained" {
		w = why + "; " + w
	}
	return HealthWarn, w
}

// badWhy says on a card that values were dropped (its Bad lists them).
func badWhy(bad []string) string {
	if len(bad) == 1 {
		return "a value dropped, not a finite number: " + bad[0]
	}
	return fmt.Sprintf("%d values dropped, not finite numbers: %s, …", len(bad), bad[0])
}

// encode is v in JSON, once for every page. vet and dropNonFinite leave
// nothing encoding/json refuses; should something still be, the error is
// logged and the view is served as a problem.
func (c *collector) encode(v *View) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		c.log.Error("console: the view cannot be encoded", "seq", v.Seq, "err", err)
		return nil
	}
	return b
}
