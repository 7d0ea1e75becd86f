package intake

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// Trust: the intake serves routers only. The headers a router sets
// (Cellkit-Client, which scopes reads to a client; Cellkit-Map-Version,
// which overrides fencing; Cellkit-Slot) are claims the cell believes, and
// the router is where API keys, rate limits and shedding are applied. So a
// request is served only when its connection is a router's:
//
//   - a connection with a verified client certificate (an intake with a
//     client CA) is a router's when the certificate names RouterRole; one
//     naming PeerRole is another cell, which may read inquiries (a read
//     of an inquiry whose user's data is not in the user's cell asks the
//     cell that holds it) and do nothing else;
//   - any other connection (plain HTTP, or TLS without client
//     certificates) is a router's when its peer address is in
//     TrustedCIDRs.
//
// Anything else is refused with 403 before the request is looked at: its
// headers are never read.

// AnyRole as Config.RouterRole takes every verified client certificate as
// a router's.
const AnyRole = "*"

// PeerRole is the role of the certificate a cell presents to the other
// cells' intake when it asks them for an inquiry.
const PeerRole = pki.RoleCell

// DefaultTrustedCIDRs are the peer addresses trusted as routers on a
// connection without a client certificate: loopback.
func DefaultTrustedCIDRs() []netip.Prefix {
	return []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
}

// caller is who a request comes from.
type caller int

const (
	untrusted caller = iota
	fromRouter
	fromPeerCell
)

// callerOf decides who r comes from; why says what it lacks when
// untrusted.
func (h *Handler) callerOf(r *http.Request) (c caller, why string) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		switch {
		case h.cfg.RouterRole == AnyRole || tlsconf.PeerHasRole(r.TLS, h.cfg.RouterRole):
			return fromRouter, ""
		case tlsconf.PeerHasRole(r.TLS, PeerRole):
			return fromPeerCell, ""
		}
		return untrusted, "its client certificate (" + subject(r.TLS) + ") does not name the role " + h.cfg.RouterRole
	}
	ip, ok := peerIP(r.RemoteAddr)
	if !ok {
		return untrusted, "its address " + r.RemoteAddr + " is not an IP address"
	}
	for _, p := range h.cfg.TrustedCIDRs {
		if p.Contains(ip) {
			return fromRouter, ""
		}
	}
	return untrusted, "its address " + ip.String() + " is not in the trusted router CIDRs (--trusted-router-cidrs) and it has no router certificate"
}

// peerIP is the IP address of a RemoteAddr, IPv4-mapped ones unmapped.
func peerIP(remote string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap().WithZone(""), true
}

func subject(cs *tls.ConnectionState) string {
	cert := cs.VerifiedChains[0][0]
	s := "CN=" + cert.Subject.CommonName
	if ou := cert.Subject.OrganizationalUnit; len(ou) > 0 {
		s += ", OU=" + strings.Join(ou, "+")
	}
	return s
}

// refuse answers 403 to a caller that is not a router (or a cell asking for
// more than a read), and logs it at most once a minute.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, why string) {
	now := h.now()
	if last := h.refusedLog.Load(); last == 0 || now.Sub(time.Unix(0, last)) >= time.Minute {
		if h.refusedLog.CompareAndSwap(last, now.UnixNano()) {
			h.log.Warn("intake request refused: not from a router (logged at most once a minute)",
				"remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "why", why)
		}
	}
	problem.Write(w, problem.New(http.StatusForbidden, problem.Forbidden,
		"cell "+h.cfg.Cell+"'s intake serves routers only, and this request is not from a router: "+why))
}
