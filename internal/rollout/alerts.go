package rollout

import (
	"context"
	"net/http"
	"net/url"
	"slices"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/gate"
)

// promAlert is one alert of Prometheus's /api/v1/alerts.
type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// firingAlerts are the alerts Prometheus (cfg.Prometheus) has firing.
func (r *Runner) firingAlerts(ctx context.Context) ([]promAlert, error) {
	var body struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	// The admin APIs' client, without their token: Prometheus is not one.
	c := adminclient.Client{HTTP: r.opts.Admin.HTTP}
	if err := c.Call(ctx, http.MethodGet, r.cfg.Prometheus, "/api/v1/alerts", nil, &body); err != nil {
		return nil, err
	}
	var out []promAlert
	for _, a := range body.Data.Alerts {
		if a.State == "firing" {
			out = append(out, a)
		}
	}
	return out, nil
}

// alertVerdict judges the alerts firing for the panel's wave against
// those firing for its baseline: for cells, by their label cell; for
// routers, by their label instance (the admin API's host:port, where
// Prometheus scrapes them).
func (r *Runner) alertVerdict(ctx context.Context, pn panel) gate.Verdict {
	alerts, err := r.firingAlerts(ctx)
	if err != nil {
		return gate.Alerts(nil, nil, err.Error())
	}
	var wave, base []string
	for _, a := range alerts {
		name := a.Labels["alertname"]
		switch {
		case pn.covers(a.Labels, true):
			wave = append(wave, name)
		case pn.covers(a.Labels, false):
			base = append(base, name)
		}
	}
	return gate.Alerts(wave, base, "")
}

// covers says whether an alert's labels name one of the wave's (or the
// baseline's) cells, or routers.
func (pn panel) covers(labels map[string]string, wave bool) bool {
	if !pn.router {
		cells := pn.baseCells
		if wave {
			cells = pn.waveCells
		}
		return labels["cell"] != "" && slices.Contains(cells, labels["cell"])
	}
	procs := pn.base
	if wave {
		procs = pn.wave
	}
	return slices.ContainsFunc(procs, func(p proc) bool {
		u, err := url.Parse(p.admin)
		return err == nil && labels["instance"] == u.Host
	})
}
