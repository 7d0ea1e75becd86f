package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/inquiry"
)

type callback struct {
	url  string
	view inquiry.View
}

func newNotifier(m *metrics, timeout time.Duration) *notifierQueue {
	return &notifierQueue{
		client: &http.Client{Timeout: timeout},
		ch:     make(chan callback, 1024),
		m:      m,
	}
}

// notifierQueue posts final records to their callback URLs: best effort,
// one attempt each, from a few goroutines behind a bounded queue (a full
// queue drops the callback; the client can always poll the status URL).
type notifierQueue struct {
	client *http.Client
	ch     chan callback
	m      *metrics
	wg     sync.WaitGroup
}

// run starts workers that send callbacks until ctx is done; callbacks still
// queued then are dropped.
func (n *notifierQueue) run(ctx context.Context, workers int) {
	for range workers {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case cb := <-n.ch:
					n.send(ctx, cb)
				}
			}
		}()
	}
}

func (n *notifierQueue) wait() { n.wg.Wait() }

func (n *notifierQueue) enqueue(rec inquiry.Record) {
	if rec.CallbackURL == "" {
		return
	}
	select {
	case n.ch <- callback{url: rec.CallbackURL, view: rec.View()}:
	default:
		n.m.callbacks.WithLabelValues("dropped").Inc()
	}
}

func (n *notifierQueue) send(ctx context.Context, cb callback) {
	body, _ := json.Marshal(cb.view)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cb.url, bytes.NewReader(body))
	if err != nil {
		n.m.callbacks.WithLabelValues("error").Inc()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		n.m.callbacks.WithLabelValues("error").Inc()
		return
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		n.m.callbacks.WithLabelValues("error").Inc()
		return
	}
	n.m.callbacks.WithLabelValues("ok").Inc()
}
