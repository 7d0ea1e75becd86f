package cell

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cellkit/cellkit/internal/intake"
	"github.com/cellkit/cellkit/internal/reload"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// TLSFiles are a cell's certificate files, as its flags name them (see
// tlsconf's RegisterFlags). A listener without a certificate speaks plain
// HTTP.
type TLSFiles struct {
	// Intake is the intake listener's (--tls-*). With a ClientCA only
	// routers' certificates (ClientRole, "" for any) and other cells'
	// (intake.PeerRole, which may only read inquiries) complete the
	// handshake.
	Intake tlsconf.ServerFiles
	// Admin is the admin listener's (--admin-tls-*). With a ClientCA only
	// certificates naming ClientRole ("" for any) complete the handshake.
	Admin tlsconf.ServerFiles
	// Peer is what the cell presents to, and how it verifies, other cells'
	// intake when it asks them for an inquiry after a slot move
	// (--peer-tls-*). Without any file and with an Intake ClientCA: the
	// intake's own certificate, verified servers by that CA.
	Peer tlsconf.ClientFiles
}

// TLS is what LoadTLS makes of TLSFiles: the configurations for Options
// (nil where plain), the role for Config.RouterRole, and the watchers that
// reload the files (run them, and trigger them on SIGHUP).
type TLS struct {
	Intake, Admin, Peer *tls.Config
	RouterRole          string
	Watchers            []*reload.Watcher
}

// LoadTLS loads files; its error names the listener and the file at fault.
// opts.What is ignored: the files are named intake_tls, admin_tls and
// peer_tls in logs and metrics.
func LoadTLS(files TLSFiles, opts tlsconf.Options) (TLS, error) {
	var t TLS
	in := files.Intake
	if in.Enabled() {
		role := in.ClientRole
		in.ClientRole = "" // checked below: routers' role or a cell's
		o := opts
		o.What = "intake_tls"
		srv, err := tlsconf.NewServer(in, o)
		if err != nil {
			return t, fmt.Errorf("intake listener: %w", err)
		}
		t.Intake = srv.Config()
		t.Watchers = append(t.Watchers, srv.Watcher())
		if in.ClientCA != "" {
			t.RouterRole = intake.AnyRole
			if role != "" {
				t.RouterRole = role
				t.Intake = requireRoles(srv, role, intake.PeerRole)
			}
		}
	} else if in.ClientCA != "" {
		return t, errors.New("intake listener: a client CA (--tls-client-ca) needs --tls-cert and --tls-key")
	}

	ad := files.Admin
	if ad.Enabled() {
		if ad.ClientCA == "" {
			ad.ClientRole = ""
		}
		o := opts
		o.What = "admin_tls"
		srv, err := tlsconf.NewServer(ad, o)
		if err != nil {
			return t, fmt.Errorf("admin listener: %w", err)
		}
		t.Admin = srv.Config()
		t.Watchers = append(t.Watchers, srv.Watcher())
	} else if ad.ClientCA != "" {
		return t, errors.New("admin listener: a client CA (--admin-tls-client-ca) needs --admin-tls-cert and --admin-tls-key")
	}

	peer := files.Peer
	if !peer.Enabled() && in.ClientCA != "" {
		peer = tlsconf.ClientFiles{CA: in.ClientCA, Cert: in.Cert, Key: in.Key}
	}
	if peer.Enabled() {
		o := opts
		o.What = "peer_tls"
		cl, err := tlsconf.NewClient(peer, o)
		if err != nil {
			return t, fmt.Errorf("client to the other cells: %w", err)
		}
		t.Peer = cl.Config()
		if w := cl.Watcher(); w != nil {
			t.Watchers = append(t.Watchers, w)
		}
	}
	return t, nil
}

// requireRoles serves srv's configuration, as last loaded, to clients whose
// certificate names one of roles.
func requireRoles(srv *tlsconf.Server, roles ...string) *tls.Config {
	var (
		mu            sync.Mutex
		from, derived *tls.Config
	)
	verify := func(cs tls.ConnectionState) error {
		if slices.ContainsFunc(roles, func(r string) bool { return tlsconf.PeerHasRole(&cs, r) }) {
			return nil
		}
		return fmt.Errorf("tls: client certificate names none of the roles %q", roles)
	}
	return &tls.Config{
		MinVersion: tlsconf.MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cur := srv.Current()
			mu.Lock()
			defer mu.Unlock()
			if cur != from {
				from, derived = cur, cur.Clone()
				derived.VerifyConnection = verify
			}
			return derived, nil
		},
	}
}
