package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/backoff"
	"github.com/cellkit/cellkit/internal/inquiry"
)

// Callbacks are best effort: a client that gave a callback_url can always
// poll the status URL for the final record instead.
//
// The notifier guards against server-side request forgery: the URL comes
// from the client, so every connection is checked when it is dialled (after
// DNS resolution, so that a name that later resolves elsewhere cannot get
// past it) and refused if the address is internal — loopback, private
// (RFC 1918, fc00::/7), link-local (169.254/16 with cloud metadata,
// fe80::/10), unspecified or 0/8, multicast, reserved (240/4, broadcast),
// CGNAT (100.64/10), and the IPv4-mapped and NAT64 (64:ff9b::/96) forms of
// these — unless it lies in an allowed prefix (Config.CallbackAllow).
// Proxies from the environment are not used and redirects are not followed.

const (
	defaultCallbackQueue   = 1024
	defaultCallbackBackoff = time.Second
)

// notifierConfig tunes a notifier. Zero values mean the defaults in brackets.
type notifierConfig struct {
	timeout  time.Duration  // bounds one POST [Config.CallbackTimeout's default]
	attempts int            // tries per callback [Config.CallbackAttempts's default]
	allow    []netip.Prefix // internal addresses that may be dialled [none]
	backoff  time.Duration  // the longest wait before the first retry, doubled for each next one up to 1024× (see retry) [1s]
	capacity int            // callbacks queued, in flight or waiting for a retry, at most [1024]
}

type callback struct {
	id       string // the inquiry, for the logs
	url      string
	body     []byte
	attempts int       // made so far
	due      time.Time // not before (a retry)
}

func newNotifier(m *metrics, log *slog.Logger, cfg notifierConfig) *notifierQueue {
	d := DefaultConfig()
	if cfg.timeout <= 0 {
		cfg.timeout = d.CallbackTimeout
	}
	if cfg.attempts <= 0 {
		cfg.attempts = d.CallbackAttempts
	}
	if cfg.backoff <= 0 {
		cfg.backoff = defaultCallbackBackoff
	}
	if cfg.capacity <= 0 {
		cfg.capacity = defaultCallbackQueue
	}
	// Prefix.Contains ignores a prefix's host bits: no need to mask.
	dialer := &net.Dialer{Timeout: cfg.timeout, Control: guardDial(cfg.allow)}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = dialer.DialContext
	return &notifierQueue{
		client: &http.Client{
			Transport: tr,
			Timeout:   cfg.timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		log:      log,
		m:        m,
		attempts: cfg.attempts,
		backoff:  cfg.backoff,
		ch:       make(chan callback, cfg.capacity),
		wake:     make(chan struct{}, 1),
	}
}

// notifierQueue posts final records to their callback URLs from a few
// workers behind a bounded queue. A transient failure (connection error,
// timeout, 5xx, 429) is retried with exponential backoff and jitter, up to
// attempts tries; the wait is kept in a delay queue, not by a worker. Any
// other failure — a 4xx, a redirect (not followed), a refused address — is
// final. A callback holds its place in the bound from enqueue to its final
// outcome, retries included; when the queue is full new callbacks are
// dropped. When the pipeline stops, callbacks still queued or waiting for a
// retry are dropped too: callbacks are best effort, the client can always
// poll the status URL.
type notifierQueue struct {
	client   *http.Client
	log      *slog.Logger
	m        *metrics
	attempts int
	backoff  time.Duration
	ch       chan callback // ready to send
	wake     chan struct{} // a retry was scheduled

	mu      sync.Mutex
	pending int        // callbacks queued, in flight or in later: at most cap(ch)
	later   []callback // waiting for a retry, by due time
	wg      sync.WaitGroup
}

// run starts workers that send callbacks, and the scheduler of retries,
// until ctx is done; callbacks still queued or waiting then are dropped.
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
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.schedule(ctx)
	}()
}

func (n *notifierQueue) wait() {
	n.wg.Wait()
	n.client.CloseIdleConnections()
}

func (n *notifierQueue) enqueue(rec inquiry.Record) {
	if rec.CallbackURL == "" {
		return
	}
	body, _ := json.Marshal(rec.View())
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending >= cap(n.ch) {
		n.m.callbacks.WithLabelValues("dropped").Inc()
		return
	}
	n.pending++
	n.push(callback{id: rec.ID, url: rec.CallbackURL, body: body})
}

// push puts a counted (pending) callback, new or due, on the channel; n.mu
// is held. It does not block: pending bounds the callbacks in the channel.
func (n *notifierQueue) push(cb callback) {
	select {
	case n.ch <- cb:
	default: // not reached while pending keeps its bound
		n.pending--
		n.m.callbacks.WithLabelValues("dropped").Inc()
	}
}

// settled releases a callback's place in the bound.
func (n *notifierQueue) settled() {
	n.mu.Lock()
	n.pending--
	n.mu.Unlock()
}

// retry schedules the next attempt of cb after the backoff of its last:
// backoff doubled for each attempt made, at most 1024×, its upper half
// drawn at random (internal/backoff), so that callbacks failing together
// do not retry in step.
func (n *notifierQueue) retry(cb callback) {
	d := backoff.Jittered(n.backoff, n.backoff<<10, cb.attempts)
	cb.due = time.Now().Add(d)
	n.mu.Lock()
	i, _ := slices.BinarySearchFunc(n.later, cb.due, func(c callback, t time.Time) int { return c.due.Compare(t) })
	n.later = slices.Insert(n.later, i, cb)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// schedule moves retries to the channel when they are due, until ctx is
// done.
func (n *notifierQueue) schedule(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		n.mu.Lock()
		now := time.Now()
		next := time.Duration(-1)
		for len(n.later) > 0 {
			if d := n.later[0].due.Sub(now); d > 0 {
				next = d
				break
			}
			cb := n.later[0]
			n.later = slices.Delete(n.later, 0, 1)
			n.push(cb)
		}
		n.mu.Unlock()
		if next >= 0 {
			t.Reset(next)
		} else {
			t.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		case <-t.C:
		}
	}
}

// send makes one attempt of cb and settles or reschedules it.
func (n *notifierQueue) send(ctx context.Context, cb callback) {
	cb.attempts++
	// A panic delivering one callback drops that callback, not the cell.
	defer func() {
		if r := recover(); r != nil {
			logPanic(n.log, n.m, "panic while delivering a callback: it is dropped; the cell goes on", "callback", r, "id", cb.id)
			n.settled()
		}
	}()
	err := n.post(ctx, cb)
	var refused *refusedError
	var transient *transientError
	switch {
	case err == nil:
		n.m.callbacks.WithLabelValues("ok").Inc()
	case ctx.Err() != nil:
		// The pipeline is stopping: dropped like the callbacks still queued.
	case errors.As(err, &refused):
		n.m.callbacks.WithLabelValues("refused").Inc()
		n.log.Warn("callback refused", "id", cb.id, "reason", refused.Error())
	case errors.As(err, &transient) && cb.attempts < n.attempts:
		n.m.callbacks.WithLabelValues("retry").Inc()
		n.log.Debug("callback failed, will retry", "id", cb.id, "attempt", cb.attempts, "reason", err.Error())
		n.retry(cb)
		return
	default:
		n.m.callbacks.WithLabelValues("error").Inc()
		n.log.Debug("callback failed", "id", cb.id, "attempts", cb.attempts, "reason", err.Error())
	}
	n.settled()
}

// transientError is a failed attempt worth retrying.
type transientError struct{ reason string }

func (e *transientError) Error() string { return e.reason }

// post makes one POST of cb. Its errors do not hold the URL (it may carry
// the client's secrets): a *refusedError, a *transientError, or another
// error for a final failure.
func (n *notifierQueue) post(ctx context.Context, cb callback) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cb.url, bytes.NewReader(cb.body))
	if err != nil {
		return errors.New("invalid callback URL")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		var refused *refusedError
		if errors.As(err, &refused) {
			return refused
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &transientError{reason: err.Error()}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // to keep the connection; the status decides
	resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return nil
	case code >= 500 || code == http.StatusTooManyRequests:
		return &transientError{reason: resp.Status}
	case code >= 300 && code < 400:
		return fmt.Errorf("%s (redirects are not followed)", resp.Status)
	default:
		return errors.New(resp.Status)
	}
}

// refusedError is the dialer's refusal of an internal address.
type refusedError struct {
	addr   string
	reason string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("address %s is %s and not in the callback allow-list", e.addr, e.reason)
}

// guardDial is the callback dialer's Control: it refuses internal addresses
// outside allow. It runs for every address dialled, after DNS resolution.
func guardDial(allow []netip.Prefix) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		var reason string
		if ap, err := netip.ParseAddrPort(address); err != nil {
			reason = "not an IP address"
		} else {
			reason = callbackRefusal(ap.Addr(), allow)
		}
		if reason != "" {
			return &refusedError{addr: address, reason: reason}
		}
		return nil
	}
}

var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	sharedCGNAT = netip.MustParsePrefix("100.64.0.0/10")
	reserved4   = netip.MustParsePrefix("240.0.0.0/4") // with 255.255.255.255
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
)

// callbackRefusal says why a callback must not connect to a — an internal
// address (see the notifier's doc) outside allow — or "" if it may. An
// IPv4-mapped or NAT64 address is judged by the IPv4 address it holds.
func callbackRefusal(a netip.Addr, allow []netip.Prefix) string {
	if !a.IsValid() {
		return "not an IP address"
	}
	a = a.WithZone("")
	ip := a.Unmap()
	if nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte(b[12:]))
	}
	for _, p := range allow {
		if p.Contains(a) || p.Contains(ip) {
			return ""
		}
	}
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsUnspecified() || thisNetwork.Contains(ip):
		return "unspecified"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	case sharedCGNAT.Contains(ip):
		return "shared (CGNAT)"
	case reserved4.Contains(ip):
		return "reserved"
	}
	return ""
}
