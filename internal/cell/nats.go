package cell

import (
	"context"
	"fmt"
	"time"

	"github.com/cellkit/cellkit/internal/backoff"
	"github.com/cellkit/cellkit/internal/natsembed"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func (c *Cell) openNATS() error {
	var err error
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	if c.cfg.NATSURL != "" {
		// A server across the network: a dead route or host is noticed
		// within two missed pings (about 3 s), and the client then moves
		// to another server of the URL list, which it tries in the order
		// given (the instance's own node first).
		opts = append(opts, nats.Name("cell-"+c.cfg.ID), nats.PingInterval(1500*time.Millisecond), nats.MaxPingsOutstanding(2), nats.DontRandomize())
		if c.cfg.NATSTokenFile != "" {
			tok, err := readToken(c.cfg.NATSTokenFile)
			if err != nil {
				return err
			}
			opts = append(opts, nats.Token(tok))
		}
		c.nc, err = nats.Connect(c.cfg.NATSURL, opts...)
		if err != nil {
			return fmt.Errorf("connect to nats %s: %w", c.cfg.NATSURL, err)
		}
	} else {
		c.ns, err = natsembed.Start(natsembed.Config{
			Name: "cell-" + c.cfg.ID, StoreDir: c.cfg.StoreDir, Port: c.cfg.NATSPort,
		}, natsembed.Options{Logger: c.log})
		if err != nil {
			return err
		}
		if c.nc, err = c.ns.Connect(); err != nil {
			return err
		}
		c.log.Info("embedded nats started", "store", c.cfg.StoreDir, "url", c.ns.ClientURL())
	}
	c.js, err = jetstream.New(c.nc)
	return err
}

// untilJetStream runs a setup step of the cell's streams and buckets, each
// try bounded by 2 s, again while it fails as a JetStream cluster does
// when it is not ready yet (no answer, no responders, a leader still
// being elected, too few peers: all nodes starting at once), until
// Config.StartTimeout. Any other error ends it at once. (Instances that
// create the same stream at once see the cluster drop the answers of all
// but one: the next try finds it made.)
func (c *Cell) untilJetStream(ctx context.Context, step func(context.Context) error) error {
	deadline := time.Now().Add(c.cfg.StartTimeout)
	for n := 1; ; n++ {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := step(sctx)
		cancel()
		if err == nil || !queue.NotReady(err) || ctx.Err() != nil {
			return err
		}
		wait := backoff.Jittered(250*time.Millisecond, 2*time.Second, n)
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%w (JetStream not ready within %v)", err, c.cfg.StartTimeout)
		}
		c.log.Warn("JetStream not ready, trying again", "err", err, "attempt", n, "in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// NATSURL is the embedded server's URL ("" if external or not listening).
func (c *Cell) NATSURL() string {
	if c.ns == nil {
		return c.cfg.NATSURL
	}
	return c.ns.ClientURL()
}
