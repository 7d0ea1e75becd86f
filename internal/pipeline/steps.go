package pipeline

import (
	"context"
	"time"

	"github.com/cellkit/cellkit/internal/backoff"
	"github.com/cellkit/cellkit/internal/inquiry"
)

// CSS is the internal credit scoring system.
type CSS interface {
	Score(ctx context.Context, userID string) (int, error)
}

// CoreBanking registers a decided inquiry and returns its reference. An
// error is transient: the inquiry is retried, and dead-lettered after the
// last attempt.
type CoreBanking interface {
	Register(ctx context.Context, rec inquiry.Record, res inquiry.Result) (string, error)
}

// LocalCSS is CSS in process: inquiry.CSSScore after Latency.
type LocalCSS struct{ Latency time.Duration }

// Score waits Latency (or ctx) and answers the user's deterministic score.
func (c LocalCSS) Score(ctx context.Context, userID string) (int, error) {
	if err := backoff.Sleep(ctx, c.Latency); err != nil {
		return 0, err
	}
	return inquiry.CSSScore(userID), nil
}

// LocalCore is core banking in process: inquiry.CoreRef after Latency.
type LocalCore struct{ Latency time.Duration }

// Register waits Latency (or ctx) and answers the inquiry's reference.
func (c LocalCore) Register(ctx context.Context, rec inquiry.Record, _ inquiry.Result) (string, error) {
	if err := backoff.Sleep(ctx, c.Latency); err != nil {
		return "", err
	}
	return inquiry.CoreRef(rec.ID), nil
}
