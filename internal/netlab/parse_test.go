package netlab

import (
	"net/netip"
	"os"
	"slices"
	"testing"
)

func TestParseProcNet(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0200A8C0:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:10E1 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0
   2: 0200A8C0:1F90 0300A8C0:C350 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 100 0 0 10 0
   3: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 100 0 0 10 0
`
	got := parseProcNet(tcp, "tcp", "0A")
	want := []Listener{
		{"tcp", netip.MustParseAddrPort("192.168.0.2:8080")},
		{"tcp", netip.MustParseAddrPort("127.0.0.1:4321")},
		{"tcp", netip.MustParseAddrPort("0.0.0.0:22")},
	}
	if !slices.Equal(got, want) {
		t.Errorf("tcp = %v, want %v", got, want)
	}
	tcp6 := `  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000
   1: 0000000000000000FFFF00000200A8C0:0051 00000000000000000000000000000000:0000 0A 00000000:00000000
`
	got = parseProcNet(tcp6, "tcp", "0A")
	want = []Listener{
		{"tcp", netip.MustParseAddrPort("[::1]:80")},
		{"tcp", netip.MustParseAddrPort("192.168.0.2:81")},
	}
	if !slices.Equal(got, want) {
		t.Errorf("tcp6 = %v, want %v", got, want)
	}
	if !want[1].Addr.Addr().Is4() || got[0].Addr.Addr().IsUnspecified() {
		t.Error("address kinds")
	}
}

func TestPickSubnet(t *testing.T) {
	pool := netip.MustParsePrefix("10.77.0.0/16")
	used := []netip.Prefix{
		netip.MustParsePrefix("10.77.0.0/24"),
		netip.MustParsePrefix("10.77.1.128/25"),
		netip.MustParsePrefix("192.0.2.0/24"),
	}
	if p, ok := pickSubnet(pool, 24, used); !ok || p != netip.MustParsePrefix("10.77.2.0/24") {
		t.Errorf("pickSubnet = %v, %v; want 10.77.2.0/24", p, ok)
	}
	if p, ok := pickSubnet(netip.MustParsePrefix("10.77.0.0/23"), 24, used); ok {
		t.Errorf("pickSubnet of a full pool = %v", p)
	}
	if _, ok := pickSubnet(pool, 24, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}); ok {
		t.Error("pickSubnet inside a used /8")
	}
}

func TestOwnerAlive(t *testing.T) {
	me, err := self()
	if err != nil {
		t.Fatal(err)
	}
	if !me.Alive() {
		t.Error("this process is not alive")
	}
	if (Owner{PID: os.Getpid(), Start: me.Start + 1}).Alive() {
		t.Error("a recycled pid (other start time) is alive")
	}
	if (Owner{}).Alive() {
		t.Error("pid 0 is alive")
	}
}

func TestConfigRefused(t *testing.T) {
	for _, cfg := range []Config{
		{Prefix: "Bad"},
		{Prefix: "waytoolongprefix"},
		{Family: "1ck"},
		{Family: "toolongfam"},
		{Subnet: netip.MustParsePrefix("10.0.0.0/8")},
		{Subnet: netip.MustParsePrefix("10.77.0.0/30")},
		{Subnet: netip.MustParsePrefix("fd00::/64")},
	} {
		if _, err := New(cfg, Options{}); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}
