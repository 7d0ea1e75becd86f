package router

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/guard"
	"github.com/cellkit/cellkit/internal/h1"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/slotrate"
)

// upstream is how the router reaches one cell: its guard, its metrics and
// answers, and its endpoints (one per instance in rotation), each with (on
// each event loop) a keep-alive connection pool sized by the bulkhead.
type upstream struct {
	cell    string
	intakes []string // the map's intake URLs, to notice endpoint changes
	eps     []*endpoint
	guard   *guard.Guard
	m       *cellMetrics
	probs   *cellProbs
	retired atomic.Bool // no longer in the map: its connections close when next idle
}

// endpoint is one instance of a cell: where to dial, what to send as Host,
// and whether it is ejected from the rotation for failing.
type endpoint struct {
	u      *upstream
	intake string
	addr   string      // host:port to dial
	host   []byte      // host[:port] as sent in Host
	prefix string      // path prefix of the intake URL, without the trailing '/'
	tls    *tls.Config // an https endpoint's TLS client configuration (nil for http)

	fails        atomic.Int32 // consecutive failed calls
	ejectedUntil atomic.Int64 // unix nanoseconds; 0: in rotation

	// The health checks' verdict (health.go): down takes the instance out
	// of rotation until a healthy check.
	down   atomic.Bool
	hung   atomic.Bool  // down for answering nothing (not for a 5xx answer)
	misses atomic.Int32 // checks missed in a row

	// Calls timed out (504) since the last log line of them, and when
	// that line was written (unix nanoseconds): see callTimedOut.
	timeouts   atomic.Int64
	timeoutLog atomic.Int64
}

func newUpstream(c slotmap.Cell, cfg CellLimits, g *guard.Guard, m *cellMetrics) (*upstream, error) {
	u := &upstream{cell: c.ID, intakes: c.Intakes(), guard: g, m: m}
	if len(u.intakes) == 0 {
		return nil, fmt.Errorf("cell %s: every instance is drained", c.ID)
	}
	for _, intake := range u.intakes {
		ep, err := newEndpoint(u, intake, cfg)
		if err != nil {
			return nil, fmt.Errorf("cell %s: %w", c.ID, err)
		}
		u.eps = append(u.eps, ep)
	}
	return u, nil
}

func newEndpoint(up *upstream, intake string, cfg CellLimits) (*endpoint, error) {
	u, err := url.Parse(intake)
	if err != nil {
		return nil, fmt.Errorf("intake %q: %w", intake, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("intake %q: want http(s)://host[:port][/prefix]", intake)
	}
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	var tc *tls.Config
	if u.Scheme == "https" {
		tc = cfg.TLS.Clone()
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if tc.ServerName == "" {
			tc.ServerName = u.Hostname()
		}
		tc.NextProtos = []string{"http/1.1"}
		if tc.ClientSessionCache == nil {
			// Connections dialled again resume their session: no
			// certificate exchange or signature.
			tc.ClientSessionCache = tls.NewLRUClientSessionCache(64)
		}
	}
	return &endpoint{
		u:      up,
		intake: intake,
		addr:   addr,
		host:   []byte(u.Host),
		prefix: strings.TrimSuffix(u.EscapedPath(), "/"),
		tls:    tc,
	}, nil
}

// ejected says whether ep is out of the rotation at now (unix ns).
func (ep *endpoint) ejected(now int64) bool { return ep.down.Load() || ep.ejectedUntil.Load() > now }

// retire marks u's connections for closing: the loops close theirs when
// idle.
func (u *upstream) retire() { u.retired.Store(true) }

// cellTable is what the router routes with: one map version and an
// upstream for each of its cells.
type cellTable struct {
	m     *slotmap.Map
	byID  map[string]*upstream
	rates *slotrate.Rates // per-slot request rates, kept across maps of the same slot count
}

// table returns the routing table of the newest known map, building it on
// the first request after a map change.
func (r *Router) table() *cellTable {
	m := r.currentMap()
	if t := r.tbl.Load(); t != nil && t.m == m {
		return t
	}
	if m == nil {
		return nil
	}
	return r.rebuild(m)
}

// currentMap is the newest of the follower's map and any map read after a
// 421.
func (r *Router) currentMap() *slotmap.Map {
	m := r.maps.Map()
	if n := r.refreshed.Load(); n != nil && (m == nil || n.Version() > m.Version()) {
		return n
	}
	return m
}

// rebuild makes the table for m, keeping the guards of known cells and the
// connection pools of cells whose endpoint did not change.
func (r *Router) rebuild(m *slotmap.Map) *cellTable {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.tbl.Load()
	if old != nil && old.m == m {
		return old
	}
	if old != nil && old.m.Version() > m.Version() {
		return old // a newer table was built meanwhile
	}
	t := &cellTable{m: m, byID: map[string]*upstream{}}
	if old != nil && old.rates.Slots() == m.Slots() {
		t.rates = old.rates
	} else {
		t.rates = slotrate.New(m.Slots(), r.cfg.SlotRateWindow, nil)
		r.slotRates.Store(t.rates)
	}
	for _, c := range m.Cells() {
		if prev := old.lookup(c.ID); prev != nil && slices.Equal(prev.intakes, c.Intakes()) {
			t.byID[c.ID] = prev
			continue
		}
		g := r.guards[c.ID]
		if g == nil {
			g = r.newGuard(c.ID)
			r.guards[c.ID] = g
		}
		u, err := newUpstream(c, r.cfg.Cell, g, r.metrics.cell(c.ID))
		if err != nil {
			// slotmap validates URLs, so this is not expected; the cell's
			// users get 503 until the map is fixed.
			r.log.Error("cannot reach cell", "cell", c.ID, "err", err)
			continue
		}
		u.probs = r.cellProbsLocked(c.ID)
		t.byID[c.ID] = u
	}
	if old != nil {
		for id, u := range old.byID {
			if t.byID[id] != u {
				u.retire()
			}
			if _, ok := t.byID[id]; !ok {
				delete(r.guards, id)
			}
		}
	}
	r.tbl.Store(t)
	r.log.Info("routing with cell map", "version", m.Version(), "cells", len(t.byID))
	return t
}

func (t *cellTable) lookup(id string) *upstream {
	if t == nil {
		return nil
	}
	return t.byID[id]
}

// refreshAfter is called when a cell answered 421 to a request routed with
// map version seen: it returns a newer map if the registry has one. Loads
// are serialised and spaced by at least RefreshInterval, so a storm of 421s
// costs the registry one read.
func (r *Router) refreshAfter(seen int64) *slotmap.Map {
	if m := r.currentMap(); m != nil && m.Version() > seen {
		return m
	}
	if r.refresh == nil {
		return nil
	}
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	if m := r.currentMap(); m != nil && m.Version() > seen {
		return m
	}
	if time.Since(r.lastRefresh) < r.cfg.RefreshInterval {
		return nil
	}
	r.lastRefresh = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.RefreshTimeout)
	defer cancel()
	m, err := r.refresh(ctx)
	switch {
	case err != nil:
		r.metrics.refreshes.WithLabelValues("error").Inc()
		r.log.Warn("cannot refresh the cell map after a 421", "err", err)
		return nil
	case m.Version() <= seen:
		r.metrics.refreshes.WithLabelValues("same").Inc()
		return nil
	}
	r.metrics.refreshes.WithLabelValues("newer").Inc()
	for {
		cur := r.refreshed.Load()
		if cur != nil && cur.Version() >= m.Version() {
			break
		}
		if r.refreshed.CompareAndSwap(cur, m) {
			break
		}
	}
	r.log.Info("cell map refreshed after a 421", "version", m.Version())
	return r.currentMap()
}

// Headers the router owns on the way to a cell.
var (
	hdrMapVersion = []byte(api.HeaderMapVersion)
	hdrSlot       = []byte(api.HeaderSlot)
	hdrClient     = []byte(api.HeaderClient)
	hdrPriority   = []byte(api.HeaderPriority)
	hdrCall       = []byte(api.HeaderCall)
	hdrRequestID  = []byte("X-Request-Id")
	hdrForwarded  = []byte("Forwarded")
	hdrXFF        = []byte("X-Forwarded-For")
	hdrXFHost     = []byte("X-Forwarded-Host")
	hdrXFProto    = []byte("X-Forwarded-Proto")
	hdrAPIKey     = []byte("X-Api-Key")
)

// dropped are the request header fields that never reach a cell:
// hop-by-hop ones (RFC 9110 §7.6.1), the framing and Host (the router sets
// its own), Expect (the body is already read), the API key, and every
// field that claims something about the client or the route: the ones the
// router sets itself and the ones other proxies use for the same claims
// (a cell might trust them). Besides these, every field named Cellkit-*
// or X-Forwarded-* is dropped: those names belong to the router and the
// cells, and a client's claim in them is replaced, not trusted.
var dropped = []string{
	"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate",
	"te", "trailer", "upgrade", "transfer-encoding", "content-length", "host", "expect",
	"x-api-key", "forwarded", "x-request-id",
	"x-real-ip", "true-client-ip", "x-client-ip", "client-ip", "x-cluster-client-ip", "cf-connecting-ip", "fastly-client-ip",
	"x-original-forwarded-for", "x-original-url", "x-rewrite-url",
}

// droppedPrefixes are the name prefixes of dropped fields.
var droppedPrefixes = []string{"cellkit-", "x-forwarded-"}

// dropField says whether a client's header field stays out of the request
// to a cell.
func dropField(name []byte) bool {
	for _, p := range droppedPrefixes {
		if len(name) >= len(p) && h1.EqualFold(name[:len(p)], p) {
			return true
		}
	}
	return nameIn(name, dropped)
}

// nameIn says whether a header field name is one of set (lower case).
func nameIn(name []byte, set []string) bool {
	for _, d := range set {
		if len(d) == len(name) && h1.EqualFold(name, d) {
			return true
		}
	}
	return false
}

var protoHTTP = []byte("http")

// forward is cl's request as it goes to its cell: the client's request
// line and fields but the dropped ones, the forwarding claims the router
// makes from what it saw, the router's identification fields, and the body
// (a chunked body goes with its length).
func (r *Router) forward(b []byte, cl *client) []byte {
	h := &cl.head
	ex := &cl.ex
	ep := ex.ep
	b = append(b, h.Method...)
	b = append(b, ' ')
	b = append(b, ep.prefix...)
	b = append(b, h.Path...)
	b = append(b, h.Query...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, ep.host...)
	b = append(b, '\r', '\n')
	for i := range h.Fields {
		f := &h.Fields[i]
		if !dropField(f.Name) {
			b = appendHeader(b, f.Name, f.Value)
		}
	}
	ip := cl.remote
	b = append(b, hdrXFF...)
	b = append(b, ':', ' ')
	b = ip.AppendTo(b)
	b = append(b, '\r', '\n')
	host := h.Host
	okHost := api.ValidForwardedHost(host)
	if okHost {
		b = appendHeader(b, hdrXFHost, host)
	}
	b = appendHeader(b, hdrXFProto, protoHTTP)
	// Forwarded: for=v4 or for="[v6]", the host asked for, the protocol.
	b = append(b, hdrForwarded...)
	b = append(b, ": for="...)
	if ip.Is6() {
		b = append(b, `"[`...)
		b = ip.AppendTo(b)
		b = append(b, `]"`...)
	} else {
		b = ip.AppendTo(b)
	}
	if okHost {
		b = append(b, `;host="`...)
		b = append(b, host...)
		b = append(b, '"')
	}
	b = append(b, ";proto=http\r\n"...)
	b = appendHeader(b, hdrClient, ex.client.IDBytes())
	if ex.lane != nil {
		b = appendHeader(b, hdrPriority, ex.lane)
	}
	b = appendHeader(b, hdrRequestID, ex.rid)
	b = appendHeaderInt(b, hdrMapVersion, ex.version)
	b = appendHeaderInt(b, hdrCall, int64(ex.uc.seq))
	if ex.slot >= 0 {
		b = appendHeaderInt(b, hdrSlot, int64(ex.slot))
	}
	if len(cl.body) > 0 || h.ContentLength >= 0 || h.Chunked {
		b = appendHeaderInt(b, hdrContentLength, int64(len(cl.body)))
	}
	b = append(b, '\r', '\n')
	return append(b, cl.body...)
}

// bstr views b as a string without copying. The caller must not keep the
// string beyond b's lifetime nor change b while it is in use: it is only
// passed to functions that read it and keep nothing (map lookups, hashing,
// validation).
func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}
