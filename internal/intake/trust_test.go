package intake

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/pki"
)

// TestOnlyTrustedAddressesAreServedOnPlainHTTP: without client
// certificates the peer address decides; loopback is trusted by default.
func TestOnlyTrustedAddressesAreServedOnPlainHTTP(t *testing.T) {
	e := newEnv(t)
	m := testMapOf(t, nil, "c1")
	e.maps.Set(m)
	u := userOf(t, m, "c1", "u-", 0)

	def := e.cell(cellOpts{id: "c1"})
	a := def.accept(t, request(u), map[string]string{api.HeaderClient: "alice"})

	for _, tc := range []struct {
		name  string
		cidrs []netip.Prefix
	}{
		{"another network", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}},
		{"no address", []netip.Prefix{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.cell(cellOpts{id: "c1", intake: Config{TrustedCIDRs: tc.cidrs}})
			hdr := map[string]string{api.HeaderClient: "alice", api.HeaderMapVersion: "999999", api.HeaderIdemKey: "k"}
			p := c.wantProblem(t, c.post(t, request(u), hdr), http.StatusForbidden, "forbidden", "")
			if !strings.Contains(p.Detail, "not from a router") || !strings.Contains(p.Detail, "127.0.0.1") {
				t.Errorf("detail %q, want it to say the request is not from a router and name the address", p.Detail)
			}
			c.wantProblem(t, c.do(t, http.MethodGet, prefixByID+a.ID, nil, hdr), http.StatusForbidden, "forbidden", "")
			c.wantStored(t, 1, 1, 0) // only the first cell's inquiry
		})
	}
}

// TestTrustOverMutualTLS: with client certificates, the certificate's role
// decides, whatever the address: a router is served, another cell may read,
// an operator (or anyone else) is refused.
func TestTrustOverMutualTLS(t *testing.T) {
	certs := celltest.DevCerts(t)
	e := newEnv(t)
	m := testMapOf(t, nil, "c1")
	e.maps.Set(m)
	u := userOf(t, m, "c1", "u-", 0)
	c := e.cell(cellOpts{id: "c1", tls: &certs})
	if !strings.HasPrefix(c.url, "https://") {
		t.Fatalf("url %s", c.url)
	}
	a := c.accept(t, request(u), map[string]string{api.HeaderClient: "alice"}) // a router
	if r := c.do(t, http.MethodGet, prefixByID+a.ID, nil, map[string]string{api.HeaderClient: "bob"}); r.status != http.StatusNotFound {
		t.Fatalf("bob reading alice's inquiry through a router: %s, want 404", r)
	}

	as := func(role string) *testCell {
		cc := *c
		cc.client = certs.TLSClient(t, role)
		return &cc
	}
	peer := as(pki.RoleCell)
	if v := peer.view(t, a.ID); v.ID != a.ID {
		t.Fatalf("a cell reading: %+v", v)
	}
	p := peer.wantProblem(t, peer.post(t, request(u), nil), http.StatusForbidden, "forbidden", "")
	if !strings.Contains(p.Detail, "another cell's") {
		t.Errorf("detail %q", p.Detail)
	}
	op := as(pki.RoleOperator)
	op.wantProblem(t, op.post(t, request(u), nil), http.StatusForbidden, "forbidden", "")
	op.wantProblem(t, op.get(t, a.ID), http.StatusForbidden, "forbidden", "")
	c.wantStored(t, 1, 1, 0)

	// AnyRole: every certificate of the CA is a router's.
	anyCert := e.cell(cellOpts{id: "c1", tls: &certs, intake: Config{RouterRole: AnyRole}})
	anyCert.client = certs.TLSClient(t, pki.RoleOperator)
	anyCert.wantAccepted(t, anyCert.post(t, request(u), nil), inquiry.Pending, false)
}

// TestAReadElsewhereOverMutualTLS: the user's cell asks the cell that
// holds an inquiry (its user's data did not move) over mutual TLS,
// presenting its cell certificate, and answers with it.
func TestAReadElsewhereOverMutualTLS(t *testing.T) {
	certs := celltest.DevCerts(t)
	e := newEnv(t)
	c1 := e.cell(cellOpts{id: "c1", tls: &certs})
	c2 := e.cell(cellOpts{id: "c2", tls: &certs})
	before := testMapOf(t, map[string]string{"c1": c1.url, "c2": c2.url}, "c1", "c2")
	e.maps.Set(before)
	u := userOf(t, before, "c2", "m-", 0)
	p, err := before.Drain("c2")
	if err != nil {
		t.Fatal(err)
	}
	alice := map[string]string{api.HeaderClient: "alice"}
	prev := c2.accept(t, request(u), alice)
	e.maps.Set(p.After)
	r := c1.do(t, http.MethodGet, prefixByID+prev.ID, nil, alice)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), prev.ID) {
		t.Fatalf("a read at the user's new cell over mTLS = %d %s, want c2's inquiry %s", r.status, r.body, prev.ID)
	}
}
