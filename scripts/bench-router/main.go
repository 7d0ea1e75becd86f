// Command bench-router holds the parts of `make bench-router`
// (scripts/bench-router.sh) that are not the router or NGINX:
//
//	bench-router backends -ports 9101,9102,9103,9104    four trivial "cells" (-tls-cert, -tls-key, -tls-client-ca: on mutual TLS)
//	bench-router minproxy -listen ADDR -backends URL,...  a minimal httputil.ReverseProxy
//	bench-router mkmap -out FILE -backends URL,...        a cell map with one cell per backend (-cells N: N cells over them)
//	bench-router churn -registry FILE -every 1s -for 20s  change the map at a steady pace (a cell's weight 1 ↔ 2)
//	bench-router certs -dir DIR                            a CA and role certificates (the TLS targets)
//	bench-router load -targets URL,... -rate 2000 ...      an open-loop load generator (-ca FILE for https)
//
// The load generator sends POST /v1/inquiries at a constant rate whatever
// the answers do (open loop) and measures each latency from the request's
// intended send time, so a stall is charged to every request it delays
// (no coordinated omission). It prints one JSON line of percentiles. Its
// pacing is internal/loadtest's Generator, the same as the drills'.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/cellkit/cellkit/internal/api"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-router: %v\n", err)
		os.Exit(1)
	}
}

// commands are bench-router's subcommands, each with its flag set.
var commands = map[string]func(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error{
	"backends": cmdBackends,
	"minproxy": cmdMinproxy,
	"mkmap":    cmdMkmap,
	"churn":    cmdChurn,
	"certs":    cmdCerts,
	"load":     cmdLoad,
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: bench-router backends|minproxy|mkmap|churn|certs|load [flags]")
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("unknown command %q", args[0])
	}
	return cmd(ctx, flag.NewFlagSet("bench-router "+args[0], flag.ContinueOnError), args[1:], stdout)
}

func cmdBackends(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	ports := fs.String("ports", "9101,9102,9103,9104", "loopback ports, one cell each")
	var files tlsconf.ServerFiles
	files.RegisterFlags(fs, "", "the backends", "router")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var tc *tls.Config
	if files.Enabled() {
		srv, err := tlsconf.NewServer(files, tlsconf.Options{What: "backends"})
		if err != nil {
			return err
		}
		tc = srv.Config()
	}
	return backends(ctx, strings.Split(*ports, ","), tc)
}

func cmdMinproxy(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	listen := fs.String("listen", "127.0.0.1:9201", "address")
	targets := fs.String("backends", "", "backend URLs, comma-separated")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return minproxy(ctx, *listen, strings.Split(*targets, ","))
}

func cmdMkmap(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	out := fs.String("out", "", "registry file to write")
	targets := fs.String("backends", "", "backend URLs, comma-separated: cells c1, c2...")
	cells := fs.Int("cells", 0, "cells in the map, their intakes taken from the backends in turn (0: one per backend)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return mkmap(ctx, *out, strings.Split(*targets, ","), *cells)
}

func cmdChurn(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	path := fs.String("registry", "", "the file registry's map to change")
	every := fs.Duration("every", time.Second, "time between two changes")
	total := fs.Duration("for", 20*time.Second, "how long to go on")
	cell := fs.String("cell", "c1", "the cell whose weight goes 1 ↔ 2")
	most := fs.Int("changes", 0, "stop after this many changes (0: when -for ends)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	n, err := churn(ctx, *path, *cell, *every, *total, *most)
	fmt.Fprintf(stdout, "{\"changes\":%d}\n", n)
	return err
}

func cmdCerts(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	dir := fs.String("dir", "", "directory to write a CA and role certificates (for localhost and 127.0.0.1) into")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return pki.WriteDev(*dir, []string{"localhost", "127.0.0.1"})
}

func cmdLoad(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	var o loadOptions
	targets := fs.String("targets", "", "base URLs, comma-separated; connections are spread over them")
	fs.StringVar(&o.name, "name", "", "label of the result")
	fs.StringVar(&o.key, "key", "", "X-API-Key to send")
	fs.Float64Var(&o.rate, "rate", 2000, "requests per second")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured time first")
	fs.IntVar(&o.conns, "conns", 64, "keep-alive connections")
	fs.IntVar(&o.users, "users", 1000, "distinct user ids")
	fs.IntVar(&o.requests, "requests", 0, "closed loop: send this many requests, each connection its share back to back, as fast as answered (no rate, no latency figures)")
	ca := fs.String("ca", "", "CA file (PEM) verifying https targets")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ca != "" {
		pool, err := tlsconf.LoadPool(*ca)
		if err != nil {
			return err
		}
		o.tls = &tls.Config{RootCAs: pool, ServerName: "localhost", ClientSessionCache: tls.NewLRUClientSessionCache(1024)}
	}
	o.targets = strings.Split(*targets, ",")
	if o.requests > 0 {
		res, err := burst(ctx, o)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(res)
	}
	res, err := load(ctx, o)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

// backends serves the trivial cells: each answers any request at once with
// a small JSON naming itself (202 to POST, 200 otherwise), and echoes the
// router's call number as a cell does (httpx.EchoCall; a proxy other than
// the router sends none).
func backends(ctx context.Context, ports []string, tc *tls.Config) error {
	var servers []*http.Server
	errc := make(chan error, len(ports))
	for i, p := range ports {
		body := []byte(fmt.Sprintf(`{"id":"c%d-0123456789abcdef","status":"pending"}`, i+1))
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			if r.Method == http.MethodPost {
				w.WriteHeader(http.StatusAccepted)
			}
			w.Write(body)
		})
		ln, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			return err
		}
		if tc != nil {
			ln = tls.NewListener(ln, tc)
		}
		srv := &http.Server{Handler: httpx.EchoCall(h), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 120 * time.Second,
			ErrorLog: log.New(io.Discard, "", 0)} // the script's port probes end TLS handshakes early
		servers = append(servers, srv)
		go func() { errc <- srv.Serve(ln) }()
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	for _, s := range servers {
		s.Close()
	}
	return nil
}

// minproxy is the smallest reasonable net/http reverse proxy: Rewrite with
// SetURL round-robin over the backends and one tuned Transport.
func minproxy(ctx context.Context, listen string, targets []string) error {
	var urls []*url.URL
	for _, t := range targets {
		u, err := url.Parse(t)
		if err != nil {
			return err
		}
		urls = append(urls, u)
	}
	var n atomic.Uint64
	rp := &httputil.ReverseProxy{
		Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(urls[n.Add(1)%uint64(len(urls))])
			pr.SetXForwarded()
		},
		ErrorLog: log.New(io.Discard, "", 0), // wrk hangs up mid-request at the end of a run
	}
	srv := &http.Server{Addr: listen, Handler: rp, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// mkmap writes a cell map with one cell per backend to a file registry.
func mkmap(ctx context.Context, out string, targets []string, cells int) error {
	m, err := slotmap.New(0, nil)
	if err != nil {
		return err
	}
	if cells <= 0 {
		cells = len(targets)
	}
	for i := range cells {
		t := targets[i%len(targets)]
		id := fmt.Sprintf("c%d", i+1)
		p, err := m.AddCell(slotmap.Cell{ID: id, Weight: 1, Intake: t, Admin: t})
		if err != nil {
			return err
		}
		m = p.After
	}
	reg, err := registry.NewFile(registry.FileConfig{Path: out}, registry.Options{})
	if err != nil {
		return err
	}
	return reg.CompareAndSwap(ctx, 0, m) // a fresh registry: the script makes a new one each run
}

// churn changes the map in the file registry at path every period for
// total, or until it made most changes (0: no limit): cell's weight goes
// 1 → 2 → 1..., each a new version (the routers rebuild their tables and
// some slots move). It returns the changes made.
func churn(ctx context.Context, path, cell string, every, total time.Duration, most int) (int, error) {
	reg, err := registry.NewFile(registry.FileConfig{Path: path}, registry.Options{})
	if err != nil {
		return 0, err
	}
	t := time.NewTicker(every)
	defer t.Stop()
	end := time.After(total)
	n := 0
	for most == 0 || n < most {
		select {
		case <-ctx.Done():
			return n, nil
		case <-end:
			return n, nil
		case <-t.C:
		}
		cur, err := reg.Load(ctx)
		if err != nil {
			return n, err
		}
		c, ok := cur.Cell(cell)
		if !ok {
			return n, fmt.Errorf("no cell %s in the map", cell)
		}
		p, err := cur.SetWeight(cell, 3-c.Weight)
		if err != nil {
			return n, err
		}
		if err := reg.CompareAndSwap(ctx, cur.Version(), p.After); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

type loadOptions struct {
	name     string
	targets  []string
	key      string
	rate     float64
	duration time.Duration
	warmup   time.Duration
	conns    int
	users    int
	requests int         // closed loop: this many requests in all (see burst)
	tls      *tls.Config // for https targets
}

// Result is the load generator's report; latencies in microseconds.
type Result struct {
	Name     string  `json:"name"`
	Rate     float64 `json:"rate"`
	Sent     int     `json:"sent"`
	Measured int     `json:"measured"`
	Errors   int     `json:"errors"`
	Non2xx   int     `json:"non_2xx"`
	Late     int     `json:"late"` // requests still queued at the end (not measured)
	P50      float64 `json:"p50_us"`
	P90      float64 `json:"p90_us"`
	P99      float64 `json:"p99_us"`
	P999     float64 `json:"p999_us"`
	Max      float64 `json:"max_us"`
}

func load(ctx context.Context, o loadOptions) (Result, error) {
	reqs := make([][]byte, o.users)
	for i := range reqs {
		body := fmt.Sprintf(`{"user_id":"user-%06d","product":"credit-line","amount":5000000,"priority":"normal"}`, i)
		reqs[i] = fmt.Appendf(nil, "POST "+api.PathInquiries+" HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nX-API-Key: %s\r\nContent-Length: %d\r\n\r\n%s", o.key, len(body), body)
	}
	total := int(o.rate * (o.warmup + o.duration).Seconds())
	interval := time.Duration(float64(time.Second) / o.rate)
	measureFrom := int(o.rate * o.warmup.Seconds())
	sched := make([]time.Duration, total)
	for i := range sched {
		sched[i] = time.Duration(i) * interval
	}
	lat := make([]time.Duration, total)
	status := make([]int32, total) // 0 not sent, >0 HTTP status, -1 error

	// The pacing is the drills' (internal/loadtest's Generator with
	// OnePacer): one thread sleeps in nanosleep until each request's
	// intended time and hands it to a free sender, each with its own
	// keep-alive connection (sender c to target c % targets). A thread per
	// sender, each taking the next request and sleeping until it is due,
	// had each free sender hold a request an interval ahead: on this
	// 2-core machine a sender woken late made its connection's requests
	// late by about the interval per connection (64 connections at
	// 2000 req/s: 32 ms), which showed as a 30 ms p50 on whichever TLS
	// target the client's extra work tipped over.
	conns := make([]*benchConn, o.conns)
	for c := range conns {
		target := o.targets[c%len(o.targets)]
		conns[c] = &benchConn{host: strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://")}
		if strings.HasPrefix(target, "https://") {
			conns[c].tls = o.tls
		}
	}
	var dialErr atomic.Value
	gen := loadtest.Generator[int32]{
		Start:    time.Now().Add(50 * time.Millisecond),
		Schedule: sched,
		Senders:  o.conns,
		OnePacer: true,
		Timeout:  5 * time.Second,
		Send: func(ctx context.Context, r loadtest.Request) int32 {
			code, err := conns[r.Sender].roundTrip(ctx, reqs[r.Seq%len(reqs)])
			if err != nil {
				if errors.Is(err, errDial) {
					dialErr.Store(err)
				}
				return -1
			}
			return int32(code)
		},
		Done: func(r loadtest.Request, code int32) {
			lat[r.Seq], status[r.Seq] = r.Latency, code
		},
	}
	sum := gen.Run(ctx)
	for _, c := range conns {
		c.close()
	}

	res := Result{Name: o.name, Rate: o.rate, Sent: sum.Sent}
	var ms []time.Duration
	for i := measureFrom; i < total; i++ {
		switch s := status[i]; {
		case s == 0:
			res.Late++
		case s < 0:
			res.Errors++
		default:
			if s < 200 || s > 299 {
				res.Non2xx++
			}
			ms = append(ms, lat[i])
		}
	}
	if err, _ := dialErr.Load().(error); err != nil && len(ms) == 0 {
		return res, err
	}
	slices.Sort(ms)
	pct := func(p float64) float64 {
		if len(ms) == 0 {
			return 0
		}
		return float64(ms[min(int(p*float64(len(ms))), len(ms)-1)].Nanoseconds()) / 1e3
	}
	res.Measured = len(ms)
	res.P50, res.P90, res.P99, res.P999, res.Max = pct(0.50), pct(0.90), pct(0.99), pct(0.999), pct(1)
	return res, nil
}

// burst sends o.requests requests in a closed loop: each of o.conns
// connections sends its share back to back, the next as soon as the last
// is answered — the proxy at saturation, over a fixed number of requests
// (for counting what it does per request). Rate is what was reached.
func burst(ctx context.Context, o loadOptions) (Result, error) {
	reqs := make([][]byte, o.users)
	for i := range reqs {
		body := fmt.Sprintf(`{"user_id":"user-%06d","product":"credit-line","amount":5000000,"priority":"normal"}`, i)
		reqs[i] = fmt.Appendf(nil, "POST "+api.PathInquiries+" HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nX-API-Key: %s\r\nContent-Length: %d\r\n\r\n%s", o.key, len(body), body)
	}
	var sent, failed, non2xx atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := range o.conns {
		share := o.requests / o.conns
		if c < o.requests%o.conns {
			share++
		}
		target := o.targets[c%len(o.targets)]
		bc := &benchConn{host: strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://")}
		if strings.HasPrefix(target, "https://") {
			bc.tls = o.tls
		}
		wg.Go(func() {
			defer bc.close()
			for i := range share {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				code, err := bc.roundTrip(rctx, reqs[(c+i*o.conns)%len(reqs)])
				cancel()
				sent.Add(1)
				switch {
				case err != nil:
					failed.Add(1)
				case code < 200 || code > 299:
					non2xx.Add(1)
				}
			}
		})
	}
	wg.Wait()
	res := Result{Name: o.name, Sent: int(sent.Load()), Errors: int(failed.Load()), Non2xx: int(non2xx.Load())}
	res.Measured = res.Sent - res.Errors
	if d := time.Since(start).Seconds(); d > 0 {
		res.Rate = float64(res.Sent) / d
	}
	if res.Measured == 0 && res.Sent > 0 {
		return res, errors.New("no request was answered")
	}
	return res, nil
}

// errDial marks a failure to connect.
var errDial = errors.New("dial")

// benchConn is one sender's keep-alive connection, dialled on first use
// and again after an error.
type benchConn struct {
	host string
	tls  *tls.Config // for an https target
	conn net.Conn
	br   *bufio.Reader
}

// roundTrip sends req and reads its answer within ctx's deadline.
func (c *benchConn) roundTrip(ctx context.Context, req []byte) (int, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.host, time.Second)
		if err == nil && c.tls != nil {
			tc := tls.Client(conn, c.tls)
			_ = tc.SetDeadline(time.Now().Add(time.Second))
			if err = tc.Handshake(); err != nil {
				conn.Close()
			}
			conn = tc
		}
		if err != nil {
			return 0, fmt.Errorf("%w: %w", errDial, err)
		}
		c.conn, c.br = conn, bufio.NewReaderSize(conn, 16<<10)
	}
	if dl, ok := ctx.Deadline(); ok {
		c.conn.SetDeadline(dl)
	}
	code, err := roundTrip(c.conn, c.br, req)
	if err != nil {
		c.close()
	}
	return code, err
}

func (c *benchConn) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// roundTrip writes one request and reads one response with a
// Content-Length body (all the targets answer so).
func roundTrip(conn net.Conn, br *bufio.Reader, req []byte) (int, error) {
	if _, err := conn.Write(req); err != nil {
		return 0, err
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, err
	}
	length := -1
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(bytes.TrimSpace(k), []byte("Content-Length")) {
			if length, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil {
				return 0, err
			}
		}
		if k, _, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(bytes.TrimSpace(k), []byte("Transfer-Encoding")) {
			return 0, errors.New("chunked answers are not supported")
		}
	}
	if length < 0 {
		return 0, errors.New("answer without Content-Length")
	}
	_, err = br.Discard(length)
	return code, err
}
