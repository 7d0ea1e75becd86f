package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/handoff"
	"github.com/cellkit/cellkit/internal/metric"
	"github.com/cellkit/cellkit/internal/quota"
	"github.com/cellkit/cellkit/internal/router"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// The router's side of a handoff (internal/handoff): at its start it takes
// the listening sockets of the router serving at --handoff-socket, if
// one does, with its TLS session ticket keys; once it serves, it says so,
// and the old router drains and ends; from then on it offers its own
// sockets at the same path to the next one.

// handoffData is what a router hands over besides its sockets.
type handoffData struct {
	// TicketKeys are the public listener's session ticket keys: sessions
	// resume across the handoff.
	TicketKeys []tlsconf.TicketKey `json:"ticket_keys,omitempty"`
	// Pools are the connections the old router holds to each cell
	// instance (host:port): the successor opens as many before it takes
	// the load over (router.Router.Warm).
	Pools map[string]int `json:"pools,omitempty"`
	// Quota is its share of each client's quota, its buckets' tokens and
	// its lease: the successor holds them on, so that a restart gives no
	// client a fresh burst.
	Quota *quota.State `json:"quota,omitempty"`
}

// takeWithin bounds how long a starting router waits for its predecessor
// to hand over its sockets.
const takeWithin = 10 * time.Second

// takeOver takes the sockets of the router at --handoff-socket, and its
// data, read once; nil when there is none (or no socket is configured).
// Its data must be within the bounds of handoffData.check: else the
// sockets are closed, the old router serves on, and this one does not
// start.
func takeOver(ctx context.Context, o options, log *slog.Logger) (*handoff.Succession, handoffData, error) {
	if o.handoffSocket == "" {
		return nil, handoffData{}, nil
	}
	tctx, cancel := context.WithTimeout(ctx, takeWithin)
	defer cancel()
	succ, err := handoff.Take(tctx, o.handoffSocket, handoff.Hello{PID: os.Getpid(), Release: o.release.ID})
	switch {
	case errors.Is(err, handoff.ErrNone):
		log.Info("no router to take over from: listening afresh", "handoff_socket", o.handoffSocket)
		return nil, handoffData{}, nil
	case err != nil:
		return nil, handoffData{}, fmt.Errorf("--handoff-socket: %w", err)
	}
	d, err := predecessorData(succ, time.Now())
	if err != nil {
		succ.Close()
		return nil, handoffData{}, fmt.Errorf("--handoff-socket %s: %w", o.handoffSocket, err)
	}
	log.Info("taking over from the router serving here", "pid", succ.State.PID, "its_generation", succ.State.Generation,
		"its_release", succ.State.Release, "sockets", succ.State.Names)
	return succ, d, nil
}

// takeOrListen is the listening socket name for addr: the predecessor's
// if it handed one over at that address, else listen(addr) (nil listen:
// nil, the caller listens later). A handed-over socket at another
// address is closed (the new configuration moves the listener).
func takeOrListen(succ *handoff.Succession, name, addr string, log *slog.Logger, listen func(string) (net.Listener, error)) (net.Listener, error) {
	if succ != nil {
		ln, err := succ.Listener(name)
		if err != nil {
			return nil, err
		}
		if ln != nil {
			if sameAddr(ln.Addr(), addr) {
				return ln, nil
			}
			log.Warn("the old router listened elsewhere: listening at the new address; the old one closes with the old router",
				"socket", name, "old", ln.Addr().String(), "new", addr)
			ln.Close()
		}
	}
	if listen == nil {
		return nil, nil
	}
	return listen(addr)
}

// sameAddr says whether a listening socket at a serves the address flag
// addr: the same port, and the same IP or both unspecified.
func sameAddr(a net.Addr, addr string) bool {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	want, err := net.ResolveTCPAddr("tcp", net.JoinHostPort(host, port))
	if err != nil || want.Port != ta.Port {
		return false
	}
	if want.IP == nil || want.IP.IsUnspecified() {
		return ta.IP.IsUnspecified()
	}
	return want.IP.Equal(ta.IP)
}

// Bounds of a predecessor's data: what a router of this build hands
// over is within them; more is refused with the handoff.
const (
	// maxPools bounds the cell instances a predecessor reports
	// connections to (a hundred cells of three instances is 300); each
	// count is at most router.WarmMax.
	maxPools = 1024
	// maxTicketKeys bounds the session ticket keys (the ring keeps 16).
	maxTicketKeys = 16
	// ticketKeyAhead is how far in the future a key may be born: the two
	// processes read one clock. A key born later would outlive its week
	// (the ring drops keys by age, and rotates after the newest's day).
	ticketKeyAhead = time.Minute
)

// predecessorData is what the old router handed over besides its
// sockets, within the bounds above at now.
func predecessorData(succ *handoff.Succession, now time.Time) (handoffData, error) {
	var d handoffData
	if succ == nil || len(succ.State.Data) == 0 {
		return d, nil
	}
	if err := json.Unmarshal(succ.State.Data, &d); err != nil {
		return d, fmt.Errorf("handoff: the old router's data: %w", err)
	}
	if err := d.check(now); err != nil {
		return handoffData{}, fmt.Errorf("handoff: the old router's data: %w", err)
	}
	return d, nil
}

// check says why d is not data a router hands over (nil: it is). Keys
// older than their week are let through: the ring drops them.
func (d handoffData) check(now time.Time) error {
	if len(d.TicketKeys) > maxTicketKeys {
		return fmt.Errorf("%d session ticket keys, over %d", len(d.TicketKeys), maxTicketKeys)
	}
	for i, k := range d.TicketKeys {
		if k.Key == ([32]byte{}) {
			return fmt.Errorf("session ticket key %d is zero", i)
		}
		if k.Born.After(now.Add(ticketKeyAhead)) {
			return fmt.Errorf("session ticket key %d is born %s, in the future", i, k.Born.Format(time.RFC3339))
		}
	}
	if len(d.Pools) > maxPools {
		return fmt.Errorf("connections to %d cell instances, over %d", len(d.Pools), maxPools)
	}
	if d.Quota != nil {
		if err := d.Quota.Check(now); err != nil {
			return err
		}
	}
	for addr, n := range d.Pools {
		if _, _, err := net.SplitHostPort(addr); err != nil || len(addr) > 300 {
			return fmt.Errorf("connections to %.80q, not a host:port", addr)
		}
		if n < 0 || n > router.WarmMax {
			return fmt.Errorf("%d connections to %s, want 0 to %d", n, addr, router.WarmMax)
		}
	}
	return nil
}

// carryQuota gives rt the predecessor's quota shares, tokens and lease.
func carryQuota(d handoffData, rt *router.Router) error {
	if d.Quota == nil || rt.Quota() == nil {
		return nil
	}
	return rt.Quota().Resume(*d.Quota)
}

// carryTicketKeys gives srv the predecessor's session ticket keys.
func carryTicketKeys(d handoffData, srv *tlsconf.Server) error {
	if len(d.TicketKeys) == 0 {
		return nil // it served without TLS
	}
	return srv.SetTicketKeys(d.TicketKeys)
}

// offer is what this router hands to a successor: its data made first,
// so that an error leaves no socket duplicated.
func offer(generation int, release string, public, admin net.Listener, tlsSrv *tlsconf.Server, rt *router.Router) (handoff.Offer, error) {
	d := handoffData{Pools: rt.Pools()}
	if q := rt.Quota(); q != nil {
		st := q.State()
		d.Quota = &st
	}
	if tlsSrv != nil {
		d.TicketKeys = tlsSrv.TicketKeys()
	}
	b, err := json.Marshal(d)
	if err != nil {
		return handoff.Offer{}, err
	}
	files, err := handoff.Files(public, admin)
	if err != nil {
		return handoff.Offer{}, err
	}
	return handoff.Offer{State: handoff.State{PID: os.Getpid(), Generation: generation, Release: release,
		Names: []string{"public", "admin"}, Data: b}, Files: files}, nil
}

// offerSockets ends the handoff this router took part in as the
// successor (its predecessor is told it serves), then offers its sockets
// at --handoff-socket until a successor is ready (sent on to) or ctx
// ends.
func offerSockets(ctx context.Context, o options, log *slog.Logger, hm *handoffMetrics, succ *handoff.Succession, pred handoffData,
	rt *router.Router, to chan<- handoff.Hello, mkOffer func() (handoff.Offer, error)) error {
	if succ != nil {
		warm(ctx, log, pred, rt)
		rctx, cancel := context.WithTimeout(ctx, takeWithin)
		err := succ.Ready(rctx)
		cancel()
		switch {
		case err == nil:
			log.Info("took over: the old router stops accepting and drains", "old_pid", succ.State.PID, "generation", hm.generation)
		case errors.Is(err, handoff.ErrGone):
			log.Warn("the old router ended before it released the sockets: serving alone", "old_pid", succ.State.PID)
		default:
			// It gave up on this process and serves on: two routers
			// must not both think they own the sockets.
			return fmt.Errorf("handoff: %w", err)
		}
	}
	notifyManager(log)
	host, err := handoff.Listen(o.handoffSocket)
	if err != nil {
		log.Error("cannot offer the sockets to a successor: an upgrade would be refused its port", "err", err)
		hm.offering.Set(0)
		return nil
	}
	hm.offering.Set(1)
	hello, err := host.Serve(ctx, o.handoffWait, mkOffer, func(h handoff.Hello, err error) {
		hm.handoffs.WithLabelValues("failed").Inc()
		log.Warn("a successor failed to take over: serving on", "successor_pid", h.PID, "successor_release", h.Release, "why", err.Error())
	})
	hm.offering.Set(0)
	if err != nil {
		if rerr := host.Remove(); rerr != nil {
			log.Warn("cannot remove the handoff socket", "err", rerr)
		}
		return nil
	}
	hm.handoffs.WithLabelValues("handed_over").Inc()
	to <- hello
	return nil
}

// warmWithin bounds the time a successor spends opening its
// predecessor's connections to the cells before it takes over.
const warmWithin = 5 * time.Second

// warm opens, before the load is taken over, as many connections to each
// cell instance as the old router holds.
func warm(ctx context.Context, log *slog.Logger, d handoffData, rt *router.Router) {
	if len(d.Pools) == 0 {
		return
	}
	want := 0
	for _, n := range d.Pools {
		want += n
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, warmWithin)
	defer cancel()
	opened := rt.Warm(wctx, d.Pools)
	log.Info("opened the old router's connections to the cells before taking over", "wanted", want, "opened", opened,
		"took", time.Since(start).Round(time.Millisecond))
}

// handOver drains a router whose successor serves: the public
// connections drain within --shutdown-timeout and what happened to them
// is logged (the admin listener's stop is the group's next).
func handOver(rt *router.Router, o options, log *slog.Logger, hm *handoffMetrics, to handoff.Hello) error {
	log.Info("handed over: no more connections accepted here; draining", "successor_pid", to.PID,
		"successor_release", to.Release, "bound", o.shutdownTimeout)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	d, err := rt.HandOver(ctx)
	hm.drained.WithLabelValues("after_answer").Add(float64(d.Conns - d.Idle - d.Cut))
	hm.drained.WithLabelValues("idle").Add(float64(d.Idle))
	hm.cut.Add(float64(d.Cut))
	attrs := []any{"connections", d.Conns, "closed_idle", d.Idle, "closed_after_answer", d.Conns - d.Idle - d.Cut,
		"cut", d.Cut, "requests_cut", d.RequestsCut, "took", time.Since(start).Round(time.Millisecond)}
	if d.Cut > 0 {
		log.Warn("drained after the handoff, cutting connections left at the bound", attrs...)
	} else {
		log.Info("drained after the handoff", attrs...)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// handoffMetrics show a router's handoffs.
type handoffMetrics struct {
	generation int
	offering   prometheus.Gauge
	handoffs   *prometheus.CounterVec
	drained    *prometheus.CounterVec
	cut        prometheus.Counter
}

func newHandoffMetrics(reg prometheus.Registerer, succ *handoff.Succession) *handoffMetrics {
	hm := &handoffMetrics{generation: 1}
	if succ != nil {
		hm.generation = succ.State.Generation + 1
	}
	metric.Gauge(reg, api.MetricRouterGeneration).Set(float64(hm.generation))
	hm.offering = metric.Gauge(reg, api.MetricRouterHandoffOffering)
	hm.handoffs = metric.CounterVec(reg, api.MetricRouterHandoffs)
	hm.drained = metric.CounterVec(reg, api.MetricRouterHandoffDrainedConnections)
	hm.cut = metric.Counter(reg, api.MetricRouterHandoffCutConnections)
	for _, o := range []string{"handed_over", "failed"} {
		hm.handoffs.WithLabelValues(o)
	}
	for _, h := range []string{"after_answer", "idle"} {
		hm.drained.WithLabelValues(h)
	}
	return hm
}

// upgradeOnSignal starts a successor at each SIGUSR2 once the router
// serves: the program at this executable's path (a new build installed
// there is the upgrade) with this process's arguments and environment. It
// takes the sockets over through --handoff-socket like any successor;
// this process drains and ends. For a process manager that runs the
// router alone (systemd: ExecReload=kill -USR2 $MAINPID; the successor
// tells it its pid through NOTIFY_SOCKET).
func upgradeOnSignal(ctx context.Context, log *slog.Logger, listening <-chan struct{}) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	select {
	case <-listening:
	case <-ctx.Done():
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sigs:
		}
		exe, err := os.Executable()
		if err != nil {
			log.Error("SIGUSR2: cannot find this program's path to start a successor", "err", err)
			continue
		}
		cmd := exec.Command(exe, os.Args[1:]...)
		cmd.Stdout, cmd.Stderr, cmd.Env = os.Stdout, os.Stderr, os.Environ()
		if err := cmd.Start(); err != nil {
			log.Error("SIGUSR2: cannot start a successor", "bin", exe, "err", err)
			continue
		}
		log.Info("SIGUSR2: started a successor to take the sockets over", "bin", exe, "successor_pid", cmd.Process.Pid)
		go func() { _ = cmd.Wait() }() // reaped if it ends while this process lives
	}
}

// notifyManager tells a service manager that passed NOTIFY_SOCKET
// (systemd's sd_notify protocol) that this process serves and is the
// service's main process now; nothing without NOTIFY_SOCKET.
func notifyManager(log *slog.Logger) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return
	}
	if strings.HasPrefix(path, "@") {
		path = "\x00" + path[1:] // an abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err == nil {
		_, err = fmt.Fprintf(c, "READY=1\nMAINPID=%d\n", os.Getpid())
		c.Close()
	}
	if err != nil {
		log.Warn("cannot tell the service manager the router serves (NOTIFY_SOCKET)", "err", err)
	}
}
