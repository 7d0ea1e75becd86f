package cellctl

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cellkit/cellkit/internal/adminauth"
	"github.com/cellkit/cellkit/internal/console"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/program"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/reload"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// DefaultConsoleListen is where `cellctl console` listens by default.
const DefaultConsoleListen = "127.0.0.1:7480"

// consoleOptions are console's flags.
type consoleOptions struct {
	listen     string
	interval   time.Duration
	tokenFile  string
	trustAdmin string
	tls        tlsconf.ServerFiles
}

func (o *consoleOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "listen", DefaultConsoleListen, "HOST:PORT the console serves on (a loopback address unless it serves TLS)")
	fs.DurationVar(&o.interval, "interval", console.DefaultConfig().Interval, "how often the console reads the registry and every admin API")
	fs.StringVar(&o.tokenFile, "token-file", "", "a file holding the token the console's pages ask for (default: the admin token; without one, a token made at start)")
	fs.StringVar(&o.trustAdmin, "trust-admin", "", "`URLS`, comma-separated: the admin APIs (http(s)://HOST:PORT) the console calls with its credentials, besides --routers and, with --tls-ca, any https one")
	o.tls.RegisterFlags(fs, "console-", "the console", pki.RoleOperator)
}

func consoleCommand() *command {
	var o consoleOptions
	c := &command{
		name:    "console",
		section: secInspect,
		summary: "serve the web console: cells, map, rollouts and routers at a glance",
		help: `Serves a read-only web console on --listen (127.0.0.1:7480): a card per cell
and instance (state, release, readiness, req/s, 5xx and shed rates, queue
depth and oldest age, sessions per agency, breakers), the map's slots as a
grid coloured by cell with a lookup (where a user or a slot goes, and why)
and the map's history with each version's diff, the rollout and the drains
in progress, and each router (map version and staleness, rates, hot users).
It reads the registry and the admin APIs every --interval, as 'status'
does, each call bounded by 2 s: a cell that does not answer is a red card
with the error and its last good figures; a registry that cannot be read
leaves the last map read on the page, with its age.

The pages need the console's token: the admin token (--admin-token-file,
CELLKIT_ADMIN_TOKEN) or --token-file, else one made at start, which the URL
printed at start carries once (?token=), for a session cookie; a token from a
file is never printed. A session lasts 12 h or until Sign out; wrong tokens
are limited (10 at once per client, then one every 6 s: 429). With
--console-tls-cert and --console-tls-key the console serves https, and with
--console-tls-client-ca an operator's client certificate is let in too. A
non-loopback --listen needs TLS. The routers are --routers, else those
announced in the registry.

The admin URLs in the map and the routers' announcements are whatever
whoever can write the registry wrote: the console calls an admin API (with
the admin token or certificate) only if it is in --trust-admin or --routers,
or is https while --tls-ca gives the cluster's CA to verify it against. The
others are not asked; the page lists them, with why. It runs until
interrupted (SIGTERM, Ctrl-C).`,
		examples: `cellctl console --trust-admin http://10.0.0.5:9101,http://10.0.0.6:9101
cellctl --tls-ca /etc/cellkit/ca.pem --admin-token-file /etc/cellkit/admin-token console --listen 127.0.0.1:9000`,
		maxArgs:   0,
		unbounded: func() bool { return true },
		flags:     o.register,
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error { return x.runConsole(ctx, o) }
	return c
}

func (x *inv) runConsole(ctx context.Context, o consoleOptions) error {
	if o.interval < 100*time.Millisecond {
		return usagef("--interval %s: at least 100ms", o.interval)
	}
	if _, port, err := net.SplitHostPort(o.listen); err != nil || port == "" {
		return usagef("--listen %q: want HOST:PORT", o.listen)
	}
	if !o.tls.Enabled() && !adminauth.Loopback(o.listen) {
		return usagef("--listen %s is not a loopback address: serve the console over TLS (--console-tls-cert, --console-tls-key)", o.listen)
	}
	trusted, err := trustedAdmin(o.trustAdmin)
	if err != nil {
		return err
	}
	token, made, err := x.consoleToken(o)
	if err != nil {
		return err
	}
	reg, err := x.openRegistry()
	if err != nil {
		return err
	}
	defer reg.Close()
	routers, listed, err := x.consoleRouters(ctx, reg)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(x.errw, nil))
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := console.DefaultConfig()
	cfg.Interval, cfg.Token = o.interval, token
	cfg.ClientCerts, cfg.ClientRole = o.tls.ClientCA != "", o.tls.ClientRole
	cfg.TrustedAdmin, cfg.TrustCA = append(trusted, listed...), x.g.tls.CA != ""
	con, err := console.New(cfg, console.Options{Registry: reg, Admin: x.admin(), Routers: routers,
		Logger: log, Registerer: promReg, Gatherer: promReg})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	scheme := "http"
	if o.tls.Enabled() {
		srv, err := tlsconf.NewServer(o.tls, tlsconf.Options{What: "console_tls", Logger: log, Registerer: promReg})
		if err != nil {
			ln.Close()
			return err
		}
		go func() { _ = program.Watch(ctx, []*reload.Watcher{srv.Watcher()}) }() // ends with ctx
		ln, scheme = tls.NewListener(ln, srv.Config()), "https"
	}
	con.Collect(ctx) // the first view, before the first page asks
	go con.Run(ctx)
	base := scheme + "://" + ln.Addr().String() + "/"
	switch {
	case made:
		// The token is nowhere else: this is the one way to it.
		fmt.Fprintf(x.out, "Console: %s?token=%s\n", base, url.QueryEscape(token))
	case o.tokenFile != "":
		// Not printed: this line may land in a log others can read.
		fmt.Fprintf(x.out, "Console: %s (sign in with the token in %s)\n", base, o.tokenFile)
	default:
		fmt.Fprintf(x.out, "Console: %s (sign in with the admin token, or open %s?token=TOKEN)\n", base, base)
	}
	x.notef("%s", trustNote(cfg))
	err = con.Serve(ctx, ln)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// consoleToken is the token the pages ask for: --token-file's, the admin
// token, or one made now (made).
func (x *inv) consoleToken(o consoleOptions) (token string, made bool, err error) {
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return "", false, usagef("--token-file: %v", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				return line, false, nil
			}
		}
		return "", false, usagef("--token-file %s holds no token", o.tokenFile)
	}
	if x.adminToken != "" {
		return x.adminToken, false, nil
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", false, err
	}
	return hex.EncodeToString(b), true, nil
}

// consoleRouters lists the routers: --routers (listed: trusted, as the
// operator named them), else the registry's announcements at each
// collection.
func (x *inv) consoleRouters(ctx context.Context, reg registry.Registry) (routers func(context.Context) ([]console.RouterRef, error), listed []string, err error) {
	if strings.TrimSpace(x.g.routers) != "" {
		urls, err := x.routerURLs(ctx)
		if err != nil {
			return nil, nil, err
		}
		refs := make([]console.RouterRef, len(urls))
		for i, u := range urls {
			refs[i] = console.RouterRef{ID: strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://"), Admin: u}
		}
		return func(context.Context) ([]console.RouterRef, error) { return refs, nil }, urls, nil
	}
	return console.AnnouncedRouters(reg), nil, nil
}

// trustedAdmin reads --trust-admin: admin base URLs, http(s)://HOST:PORT.
func trustedAdmin(list string) ([]string, error) {
	var out []string
	for _, raw := range strings.Split(list, ",") {
		if raw = strings.TrimSpace(raw); raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
			return nil, usagef("--trust-admin: %q: want an admin API's base URL, http(s)://HOST:PORT", raw)
		}
		out = append(out, raw)
	}
	return out, nil
}

// trustNote says which admin APIs the console calls with its credentials.
func trustNote(cfg console.Config) string {
	var parts []string
	if len(cfg.TrustedAdmin) > 0 {
		parts = append(parts, strings.Join(cfg.TrustedAdmin, ", "))
	}
	if cfg.TrustCA {
		parts = append(parts, "https ones verified against --tls-ca")
	}
	if len(parts) == 0 {
		return "The console calls no admin API: none is trusted (--trust-admin, --routers, or --tls-ca for https ones); the page lists those it did not ask."
	}
	return "The console calls with its credentials only these admin APIs: " + strings.Join(parts, "; ") + "."
}
