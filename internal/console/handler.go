package console

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/problem"
)

//go:embed assets
var assets embed.FS

// securityHeaders go on every answer: nothing but the console's own
// files, no framing, no referrer (a first URL holds the token).
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
		"frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
}

// Handler serves the console.
func (c *Console) Handler() http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpx.JSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("GET /readyz", c.readyz)
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", onlyFiles(files)))
	mux.HandleFunc("GET /{$}", c.guard(false, func(w http.ResponseWriter, _ *http.Request) {
		c.page(w, http.StatusOK, "index.html")
	}))
	mux.HandleFunc("POST /login", c.login)
	mux.HandleFunc("POST /logout", c.logout)
	mux.HandleFunc("GET /api/view", c.guard(true, c.serveView))
	mux.HandleFunc("GET /api/events", c.guard(true, c.serveEvents))
	mux.HandleFunc("GET /api/map", c.guard(true, c.serveMap))
	mux.HandleFunc("GET /api/lookup", c.guard(true, c.serveLookup))
	mux.HandleFunc("GET /api/history", c.guard(true, c.serveHistory))
	mux.HandleFunc("GET /api/history/{version}", c.guard(true, c.serveDiff))
	if c.gatherer != nil {
		mux.Handle("GET /metrics", c.guard(true, promhttp.HandlerFor(c.gatherer, promhttp.HandlerOpts{}).ServeHTTP))
	}
	return httpx.Contain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		if !strings.HasPrefix(r.URL.Path, "/assets/") {
			w.Header().Set("Cache-Control", "no-store")
		}
		if h, pattern := mux.Handler(r); pattern == "" {
			c.notFound(w, r, h)
			return
		}
		mux.ServeHTTP(w, r) // sets the path's values

	}), func(v any, r *http.Request) {
		c.log.Error("console: a request panicked", "path", r.URL.Path, "panic", fmt.Sprint(v))
	})
}

// notFound answers what the mux does not route with a problem: 405 with
// Allow for a path served by another method, 404 otherwise.
func (c *Console) notFound(w http.ResponseWriter, r *http.Request, h http.Handler) {
	rec := &headerOnly{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if rec.code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", rec.header.Get("Allow"))
		problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.MethodNotAllowed, r.Method+" is not served on "+r.URL.Path))
		return
	}
	problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "the console has no "+r.URL.Path))
}

// headerOnly records what the mux's own 404 or 405 handler would answer.
type headerOnly struct {
	header http.Header
	code   int
}

func (h *headerOnly) Header() http.Header         { return h.header }
func (h *headerOnly) Write(b []byte) (int, error) { return len(b), nil }
func (h *headerOnly) WriteHeader(code int)        { h.code = code }

// onlyFiles serves the embedded files, not their directory listings.
func onlyFiles(files http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "no such asset"))
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// page writes one of the embedded pages.
func (c *Console) page(w http.ResponseWriter, status int, name string) {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "no such page"))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client went away: nothing to do
}

func (c *Console) readyz(w http.ResponseWriter, _ *http.Request) {
	v, _, _ := c.col.latest()
	if v == nil {
		httpx.JSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "detail": "no view collected yet"})
		return
	}
	httpx.JSON(w, http.StatusOK, map[string]any{"ready": true, "seq": v.Seq, "registry_ok": v.Registry.OK})
}

func (c *Console) serveView(w http.ResponseWriter, _ *http.Request) {
	v, b, _ := c.col.latest()
	switch {
	case v == nil:
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.NotReady, "the console has not collected its first view yet"), time.Second)
	case b == nil:
		problem.Write(w, problem.New(http.StatusInternalServerError, problem.Internal, fmt.Sprintf("view %d cannot be encoded (the console's log says why)", v.Seq)))
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(append(b[:len(b):len(b)], '\n')) // the client went away: nothing to do
	}
}

// serveEvents streams each new view as a server-sent event ("view"),
// and a comment every 15 s so that proxies keep the stream open. A
// stream opened with a session ends with it (logout, expiry).
func (c *Console) serveEvents(w http.ResponseWriter, r *http.Request) {
	if n := c.streams.Add(1); n > int64(c.cfg.MaxStreams) {
		c.streams.Add(-1)
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.Overloaded,
			fmt.Sprintf("the console already serves %d event streams", c.cfg.MaxStreams)), 5*time.Second)
		return
	}
	c.metrics.streams.Inc()
	defer func() { c.streams.Add(-1); c.metrics.streams.Dec() }()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var sent uint64
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	ss := sessionOf(r)
	var ended <-chan struct{} // nil without a session: never
	if ss != nil {
		ended = ss.ended
	}
	for {
		if ss != nil && !c.sessions.live(ss, c.now()) {
			return
		}
		v, b, next := c.col.latest()
		if v != nil && b != nil && v.Seq != sent {
			if err := writeEvent(rc, w, "event: view\nid: "+fmt.Sprint(v.Seq)+"\ndata: "+string(b)+"\n\n"); err != nil {
				return
			}
			sent = v.Seq
		}
		select {
		case <-r.Context().Done():
			return
		case <-ended:
			return
		case <-next:
		case <-keepAlive.C:
			if err := writeEvent(rc, w, ": keep-alive\n\n"); err != nil {
				return
			}
		}
	}
}

// writeEvent writes and flushes one event within 10 s: a page that stops
// reading is dropped, not waited for.
func writeEvent(rc *http.ResponseController, w http.ResponseWriter, s string) error {
	if err := rc.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	if _, err := w.Write([]byte(s)); err != nil {
		return err
	}
	return rc.Flush()
}
