package registry

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
)

// RolloutWatchEvery is how often a router reads the rollout's record.
const RolloutWatchEvery = 10 * time.Second

// RolloutWatch reads the rollout's record beside the map now and then and
// exports where it stands, so that the processes that follow the map (the
// routers) carry a halted or stuck rollout into Prometheus whatever
// happens to the cellctl that drives it.
type RolloutWatch struct {
	doc   Document
	every time.Duration
	log   *slog.Logger

	errors prometheus.Counter

	mu   sync.Mutex
	head *api.RolloutHead // nil: no record
}

// NewRolloutWatch watches reg's rollout record every every (nil when reg
// keeps no document beside its map), exporting on reg (prefixed by the
// caller, as the follower's metrics are): rollout_state{state} 1 for the
// record's state ("none" without a record), rollout_wave (the wave in
// progress, from 1), rollout_waves, rollout_updated_timestamp_seconds and
// rollout_read_errors_total.
func NewRolloutWatch(reg Registry, every time.Duration, registerer prometheus.Registerer, log *slog.Logger) *RolloutWatch {
	doc := DocumentFor(reg, api.RolloutDocument)
	if doc == nil {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &RolloutWatch{doc: doc, every: every, log: log}
	for _, s := range append([]string{"none"}, api.RolloutStates...) {
		metric.GaugeFunc(registerer, api.MetricRolloutState, func() float64 {
			h := w.Head()
			if (h == nil && s == "none") || (h != nil && h.State == s) {
				return 1
			}
			return 0
		}, prometheus.Labels{api.LabelState: s})
	}
	metric.GaugeFunc(registerer, api.MetricRolloutWave,
		func() float64 { return w.field(func(h *api.RolloutHead) float64 { return float64(h.Wave + 1) }) })
	metric.GaugeFunc(registerer, api.MetricRolloutWaves,
		func() float64 { return w.field(func(h *api.RolloutHead) float64 { return float64(len(h.Waves)) }) })
	metric.GaugeFunc(registerer, api.MetricRolloutUpdatedTimestampSeconds,
		func() float64 {
			return w.field(func(h *api.RolloutHead) float64 { return float64(h.Updated.UnixNano()) / 1e9 })
		})
	w.errors = metric.Counter(registerer, api.MetricRolloutReadErrors)
	return w
}

func (w *RolloutWatch) field(f func(*api.RolloutHead) float64) float64 {
	if h := w.Head(); h != nil {
		return f(h)
	}
	return 0
}

// Head is the record's head as last read (nil: no record).
func (w *RolloutWatch) Head() *api.RolloutHead {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.head
}

// Read reads the record once; a failed read keeps what was read before.
func (w *RolloutWatch) Read(ctx context.Context) error {
	data, _, err := w.doc.Get(ctx)
	var head *api.RolloutHead
	switch {
	case errors.Is(err, ErrNoDocument):
		err = nil
	case err == nil:
		var h api.RolloutHead
		if err = json.Unmarshal(data, &h); err == nil {
			head = &h
		}
	}
	if err != nil {
		w.errors.Inc()
		return err
	}
	w.mu.Lock()
	w.head = head
	w.mu.Unlock()
	return nil
}

// Run reads the record every w.every until ctx ends; a failed read is
// logged once until a read succeeds again.
func (w *RolloutWatch) Run(ctx context.Context) error {
	t := time.NewTicker(w.every)
	defer t.Stop()
	failing := false
	for {
		if err := w.Read(ctx); err != nil && ctx.Err() == nil {
			if !failing {
				w.log.Warn("cannot read the rollout record; its metrics keep the last state read", "record", w.doc.Describe(), "err", err)
			}
			failing = true
		} else {
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
