package netlab

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/cellkit/cellkit/internal/devstack"
)

// Host is a network namespace of the lab with one address.
type Host struct {
	lab               *Lab
	name, netns, link string
	addr              netip.Addr
}

// Name is the host's name in the lab ("cell1").
func (h *Host) Name() string { return h.name }

// Netns is its namespace's name (PREFIX-NAME), for `ip netns exec`.
func (h *Host) Netns() string { return h.netns }

// Link is the outer end of its veth pair, the bridge's port.
func (h *Host) Link() string { return h.link }

// Addr is its address.
func (h *Host) Addr() netip.Addr { return h.addr }

// HostPort is "ADDR:PORT" on the host, for a listen flag or a URL.
func (h *Host) HostPort(port int) string {
	return net.JoinHostPort(h.addr.String(), strconv.Itoa(port))
}

// Command returns a command that runs name with args inside the host's
// namespace (through `ip netns exec`, which then executes name in its own
// place: the pid is name's). Its environment and output are the caller's
// to set, as for exec.CommandContext; Close kills it if it still runs.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	ip, err := ipPath()
	if err != nil {
		ip = "ip" // Start then fails saying so
	}
	return exec.CommandContext(ctx, ip, append([]string{"netns", "exec", h.netns, name}, args...)...)
}

// Start starts a supervised process inside the host (devstack.Start with
// p.Netns set to the host's namespace) and records its pid in the lab's
// state file, so that a sweep kills it even if it has left the namespace's
// process list by then.
func (h *Host) Start(p devstack.Process) (*devstack.Child, error) {
	l := h.lab
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, errors.New("netlab: lab closed")
	}
	p.Netns = h.netns
	c, err := devstack.Start(p)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.st.Procs = append(l.st.Procs, ProcState{Host: h.name, Name: p.Name, PID: c.PID, Bin: p.Bin})
	err = l.save()
	l.mu.Unlock()
	if err != nil {
		_, _ = devstack.Stop(context.Background(), c.Process, 0) // the state file's error is the one reported
		<-c.Exited()
		return nil, err
	}
	return c, nil
}

// Cut drops every packet between h and peer, both ways, with a blackhole
// route to the other in each namespace: a connection from either end
// fails at once, one to either end finds no answer. Other hosts and the
// gateway still reach both. Cutting a cut pair again does nothing.
func (h *Host) Cut(peer *Host) error {
	if peer == h {
		return fmt.Errorf("netlab: cut %s from itself", h.name)
	}
	err := runIPs(
		[]string{"-n", h.netns, "route", "replace", "blackhole", peer.addr.String() + "/32"},
		[]string{"-n", peer.netns, "route", "replace", "blackhole", h.addr.String() + "/32"},
	)
	if err != nil {
		return fmt.Errorf("netlab: cut %s from %s: %w", h.name, peer.name, err)
	}
	h.lab.log.Debug("cut", "host", h.name, "peer", peer.name)
	return nil
}

// Heal removes the blackhole routes Cut made between h and peer. Healing a
// pair that is not cut does nothing.
func (h *Host) Heal(peer *Host) error {
	for _, r := range [][2]*Host{{h, peer}, {peer, h}} {
		out, err := runIP("-n", r[0].netns, "route", "del", "blackhole", r[1].addr.String()+"/32")
		if err != nil && !strings.Contains(out, "No such process") {
			return fmt.Errorf("netlab: heal %s and %s: %w", h.name, peer.name, err)
		}
	}
	h.lab.log.Debug("healed", "host", h.name, "peer", peer.name)
	return nil
}

// Cuts are the addresses h has a blackhole route to.
func (h *Host) Cuts() ([]netip.Addr, error) {
	out, err := runIP("-n", h.netns, "route", "show", "type", "blackhole")
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "blackhole" {
			continue
		}
		if a, err := netip.ParseAddr(strings.TrimSuffix(f[1], "/32")); err == nil {
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}

// LinkDown unplugs the host: its veth's outer end goes down, so nothing
// reaches it and it reaches nothing (not even the gateway) until LinkUp.
func (h *Host) LinkDown() error {
	if _, err := runIP("link", "set", h.link, "down"); err != nil {
		return fmt.Errorf("netlab: unplug %s: %w", h.name, err)
	}
	h.lab.log.Debug("link down", "host", h.name)
	return nil
}

// LinkUp plugs the host back in.
func (h *Host) LinkUp() error {
	if _, err := runIP("link", "set", h.link, "up"); err != nil {
		return fmt.Errorf("netlab: plug %s back: %w", h.name, err)
	}
	h.lab.log.Debug("link up", "host", h.name)
	return nil
}

// LinkIsUp reports whether the host is plugged in (its outer veth end is
// administratively up).
func (h *Host) LinkIsUp() (bool, error) {
	i, err := net.InterfaceByName(h.link)
	if err != nil {
		return false, err
	}
	return i.Flags&net.FlagUp != 0, nil
}

// PIDs are the processes running in the host.
func (h *Host) PIDs() ([]int, error) { return netnsPIDs(h.netns) }

// Listener is a socket bound in a host: a listening TCP socket or an
// unconnected UDP one.
type Listener struct {
	Proto string // tcp, udp
	Addr  netip.AddrPort
}

func (l Listener) String() string { return l.Proto + " " + l.Addr.String() }

// Listeners are the host's bound sockets (from /proc/PID/net of a process
// inside it); none when no process runs there.
func (h *Host) Listeners() ([]Listener, error) {
	pids, err := h.PIDs()
	if err != nil {
		return nil, err
	}
	var last error
	for _, pid := range pids {
		ls, err := procListeners("/proc/" + strconv.Itoa(pid) + "/net/")
		if err == nil {
			return ls, nil
		}
		last = err // gone meanwhile: try the next
	}
	return nil, last
}

// procListeners reads the tcp, tcp6, udp and udp6 tables under dir.
func procListeners(dir string) ([]Listener, error) {
	var all []Listener
	for _, f := range []struct {
		file, proto, state string
	}{{"tcp", "tcp", "0A"}, {"tcp6", "tcp", "0A"}, {"udp", "udp", "07"}, {"udp6", "udp", "07"}} {
		b, err := os.ReadFile(dir + f.file)
		if err != nil {
			if os.IsNotExist(err) && strings.HasSuffix(f.file, "6") { // no IPv6
				continue
			}
			return nil, err
		}
		all = append(all, parseProcNet(string(b), f.proto, f.state)...)
	}
	return all, nil
}

// parseProcNet returns the sockets of a /proc/net table in state (0A
// listening, 07 unconnected).
func parseProcNet(table, proto, state string) []Listener {
	var ls []Listener
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != state {
			continue
		}
		host, port, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err != nil {
			continue
		}
		addr, ok := parseProcAddr(host)
		if !ok {
			continue
		}
		ls = append(ls, Listener{Proto: proto, Addr: netip.AddrPortFrom(addr, uint16(p))})
	}
	return ls
}

// parseProcAddr decodes an address of /proc/net: 32-bit words in hex, each
// in the machine's byte order.
func parseProcAddr(s string) (netip.Addr, bool) {
	b, err := hex.DecodeString(s)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.Addr{}, false
	}
	out := make([]byte, len(b))
	for i := 0; i < len(b); i += 4 {
		binary.NativeEndian.PutUint32(out[i:], binary.BigEndian.Uint32(b[i:]))
	}
	a, ok := netip.AddrFromSlice(out)
	return a.Unmap(), ok
}
