package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/cellkit/cellkit/internal/slotmap"
)

// upstream is how the router reaches one cell: its intake endpoint and one
// keep-alive connection pool sized to the cell's bulkhead.
type upstream struct {
	cell   string
	intake string // the map's Intake URL, to notice endpoint changes
	scheme []byte
	host   []byte // host[:port] as sent in Host
	prefix string // path prefix of the intake URL, without the trailing '/'
	hc     *fasthttp.HostClient
	guard  *guard
	m      *cellMetrics
	probs  *cellProbs
}

func newUpstream(c slotmap.Cell, cfg CellLimits, g *guard, m *cellMetrics) (*upstream, error) {
	u, err := url.Parse(c.Intake)
	if err != nil {
		return nil, fmt.Errorf("cell %s: intake %q: %w", c.ID, c.Intake, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("cell %s: intake %q: want http(s)://host[:port][/prefix]", c.ID, c.Intake)
	}
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	dialTimeout := cfg.DialTimeout
	return &upstream{
		cell:   c.ID,
		intake: c.Intake,
		scheme: []byte(u.Scheme),
		host:   []byte(u.Host),
		prefix: strings.TrimSuffix(u.EscapedPath(), "/"),
		guard:  g,
		m:      m,
		hc: &fasthttp.HostClient{
			Addr:  addr,
			IsTLS: u.Scheme == "https",
			DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
				d := net.Dialer{Timeout: min(timeout, dialTimeout), KeepAlive: 30 * time.Second}
				return d.Dial("tcp", addr)
			},
			NoDefaultUserAgentHeader:  true,
			MaxConns:                  cfg.MaxConcurrent,
			MaxIdleConnDuration:       cfg.IdleConnTimeout,
			MaxResponseBodySize:       cfg.MaxResponseBytes,
			MaxIdemponentCallAttempts: 2,
			RetryIfErr:                retryStaleConn,
			DisablePathNormalizing:    true, // the server normalised it already
			SecureErrorLogMessage:     true,
		},
	}, nil
}

// retryStaleConn retries a request once when a kept-alive connection turned
// out to be closed by the cell before it answered anything, and only when
// repeating it is safe (GET, HEAD, or a POST with an Idempotency-Key, which
// the cell dedupes), as net/http's Transport does.
func retryStaleConn(req *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	if attempts > 1 {
		return false, false
	}
	stale := errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	if !stale {
		return false, false
	}
	idempotent := req.Header.IsGet() || req.Header.IsHead() || len(req.Header.Peek("Idempotency-Key")) > 0
	return false, idempotent
}

// cellTable is what the router routes with: one map version and an
// upstream for each of its cells.
type cellTable struct {
	m    *slotmap.Map
	byID map[string]*upstream
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
	for _, c := range m.Cells() {
		if prev := old.lookup(c.ID); prev != nil && prev.intake == c.Intake {
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
				u.hc.CloseIdleConnections()
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
	hdrMapVersion = []byte("Cellkit-Map-Version")
	hdrSlot       = []byte("Cellkit-Slot")
	hdrClient     = []byte("Cellkit-Client")
	hdrRequestID  = []byte("X-Request-Id")
	hdrForwarded  = []byte("Forwarded")
	hdrXFF        = []byte("X-Forwarded-For")
	hdrXFHost     = []byte("X-Forwarded-Host")
	hdrXFProto    = []byte("X-Forwarded-Proto")
	hdrAPIKey     = []byte("X-Api-Key")
)

// hopByHop are the headers that describe one connection, not the message
// (RFC 9110 §7.6.1); Connection itself is handled by fasthttp.
var hopByHop = [][]byte{
	[]byte("Keep-Alive"), []byte("Proxy-Connection"), []byte("Proxy-Authorization"),
	[]byte("Proxy-Authenticate"), []byte("Te"), []byte("Trailer"), []byte("Upgrade"),
}

// dropped are the request headers that never reach a cell, as fasthttp
// normalises their names: hop-by-hop ones, Expect (the body is already
// read), the API key, and the ones the router sets itself (the client's
// claims are replaced, not trusted).
var dropped = append(slices.Clone(hopByHop), []byte("Expect"), hdrAPIKey, hdrForwarded, hdrXFF, hdrXFHost, hdrXFProto,
	hdrClient, hdrRequestID, hdrMapVersion, hdrSlot)

// droppedIndex returns k's index in dropped, or -1.
func droppedIndex(k []byte) int {
	for i, d := range dropped {
		if len(d) == len(k) && string(d) == string(k) {
			return i
		}
	}
	return -1
}

// prepare rewrites the client's request, in place, into the request to the
// cells: the API key and hop-by-hop headers go, the client's own
// forwarding claims are replaced by what the router saw, and the router's
// identification headers are added. It returns whether the client asked to
// close its connection (the cell connection stays open regardless).
//
// It scans the header once; headers are only deleted when present and the
// router's own are appended, not searched for.
func prepare(ctx *fasthttp.RequestCtx, client *Client, rid []byte) (clientClose bool) {
	h := &ctx.Request.Header
	clientClose = h.ConnectionClose()
	h.ResetConnectionClose()
	var present uint64
	for k := range h.All() {
		if i := droppedIndex(k); i >= 0 {
			present |= 1 << i
		}
	}
	for i := 0; present != 0; i++ {
		if present&(1<<i) != 0 {
			h.DelBytes(dropped[i])
			present &^= 1 << i
		}
	}
	var buf [160]byte
	ip := remoteIP(ctx)
	host := ctx.Host()
	h.AddBytesKV(hdrXFF, ip.AppendTo(buf[:0]))
	if validHost(host) {
		h.AddBytesKV(hdrXFHost, host)
	}
	h.AddBytesKV(hdrXFProto, proto(ctx))
	// Forwarded: for=v4 or for="[v6]", the host asked for, the protocol.
	b := append(buf[:0], "for="...)
	if ip.Is6() {
		b = append(b, `"[`...)
		b = ip.AppendTo(b)
		b = append(b, `]"`...)
	} else {
		b = ip.AppendTo(b)
	}
	if validHost(host) {
		b = append(b, `;host="`...)
		b = append(b, host...)
		b = append(b, '"')
	}
	b = append(b, ";proto="...)
	b = append(b, proto(ctx)...)
	h.AddBytesKV(hdrForwarded, b)
	h.AddBytesKV(hdrClient, client.idBytes)
	h.AddBytesKV(hdrRequestID, rid)
	return clientClose
}

var (
	protoHTTP  = []byte("http")
	protoHTTPS = []byte("https")
)

func proto(ctx *fasthttp.RequestCtx) []byte {
	if ctx.IsTLS() {
		return protoHTTPS
	}
	return protoHTTP
}

func remoteIP(ctx *fasthttp.RequestCtx) netip.Addr {
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.IPv4Unspecified()
}

// validHost accepts what may appear inside a quoted Forwarded host: a host
// name or address with an optional port.
func validHost(h []byte) bool {
	if len(h) == 0 || len(h) > 100 {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	return true
}

// target points the prepared request at a cell for one attempt.
func target(req *fasthttp.Request, u *upstream, version int64, slot int, path []byte) {
	uri := req.URI()
	uri.SetSchemeBytes(u.scheme)
	uri.SetHostBytes(u.host)
	if u.prefix != "" {
		var buf [256]byte
		uri.SetPathBytes(append(append(buf[:0], u.prefix...), path...))
	}
	req.Header.SetHostBytes(u.host)
	var num [20]byte
	req.Header.SetBytesKV(hdrMapVersion, strconv.AppendInt(num[:0], version, 10))
	if slot >= 0 {
		req.Header.SetBytesKV(hdrSlot, strconv.AppendInt(num[:0], int64(slot), 10))
	} else {
		req.Header.DelBytes(hdrSlot)
	}
}

// cleanResponse drops the cell's hop-by-hop headers from its answer.
func cleanResponse(resp *fasthttp.Response) {
	resp.Header.ResetConnectionClose()
	for _, k := range hopByHop {
		resp.Header.DelBytes(k)
	}
}

// isTimeout says whether a call to a cell got no answer in time (as
// opposed to a refused, unreachable or broken connection: a dial timeout
// counts as unreachable).
func isTimeout(err error) bool {
	var oe *net.OpError
	if errors.Is(err, fasthttp.ErrDialTimeout) || errors.As(err, &oe) && oe.Op == "dial" {
		return false
	}
	if errors.Is(err, fasthttp.ErrTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
