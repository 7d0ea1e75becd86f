package router

import (
	"net/http"

	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/quota"
)

// QuotaSharing makes a router share each client's quota with the other
// routers (internal/quota): its buckets start empty and hold the shares
// its leases give it.
type QuotaSharing struct {
	// Board is where the routers' leases live: the registry.
	Board quota.Board
	// Config tunes the sharing; its Router is the router's id.
	Config quota.Config
}

// Quota is the router's quota sharer, nil when it holds every quota
// whole. The caller runs it (Sharer.Run) and hands its state over.
func (r *Router) Quota() *quota.Sharer { return r.sharer }

// buckets are the router's token buckets as the sharer sees them: those
// of the keys in use at each call. Keys swapped meanwhile keep a client's
// bucket (apikey.Limits.For), so a share set on one ring holds in the
// next.
type buckets struct{ r *Router }

func (b buckets) Usage() []apikey.Usage              { return b.r.ring().limits.Usage() }
func (b buckets) SetShares(s []apikey.Share)         { b.r.ring().limits.SetShares(s) }
func (b buckets) SetTokens(client string, f float64) { b.r.ring().limits.SetTokens(client, f) }

// serveQuota answers GET /v1/admin/quota: each client's quota as this
// router knows it.
func (r *Router) serveQuota(w http.ResponseWriter, _ *http.Request) {
	if r.sharer == nil {
		problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "this router does not share quotas: it holds each client's whole"))
		return
	}
	httpx.Indent(w, http.StatusOK, r.sharer.View())
}
