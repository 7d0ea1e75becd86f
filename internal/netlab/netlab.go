// Package netlab builds a test network out of Linux network namespaces:
// each host is a namespace with one address, joined to the others by a
// veth pair whose outer end is a port of one bridge in the root namespace.
// The root namespace has the bridge's own address (the gateway), so a
// process on the machine reaches every host; hosts reach each other and
// the gateway, nothing else (no default route).
//
//	lab, err := netlab.New(netlab.Config{Family: "ckt"}, netlab.Options{Logger: log})
//	defer lab.Close()
//	a, _ := lab.AddHost("cell1")   // namespace ckt1a2b-cell1, 10.77.0.2
//	b, _ := lab.AddHost("router1") // namespace ckt1a2b-router1, 10.77.0.3
//	a.Start(devstack.Process{...}) // a program inside cell1 (ip netns exec)
//	a.Cut(b)                       // blackhole routes both ways; Heal undoes it
//	a.LinkDown()                   // unplug cell1; LinkUp plugs it back
//
// Every name the lab makes starts with its prefix and a dash: the
// namespaces PREFIX-HOST, the bridge PREFIX-br, the outer veth ends
// PREFIX-hN (the inner end is eth0 in the host's namespace). The prefix is
// Config.Prefix, or a family and 4 random hex digits ("ckt1a2b"), short
// enough for the kernel's 15-byte interface names.
//
// Cleanup survives a crash: before it makes anything the lab records
// itself in STATEDIR/netlab-PREFIX.json (its prefix, subnet, owner process,
// hosts and the processes started through Host.Start), and Sweep removes
// everything of a prefix by name (killing every process inside its
// namespaces and those recorded) whether or not the lab's owner is alive.
// SweepStale removes the labs of a family whose owner has died, which is
// what a test calls before it makes its own. Close is Sweep of the lab's
// own prefix.
//
// The lab needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the ip command
// (iproute2); Available says whether this machine can run one.
package netlab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const (
	// DefaultFamily starts a lab's random prefix when Config gives none.
	DefaultFamily = "ck"
	// DefaultStateDir keeps the labs' records when Config gives no
	// directory: on tmpfs, gone at a reboot like the namespaces themselves.
	DefaultStateDir = "/run/cellkit-netlab"
	// lockPath serializes the choice of subnets between processes: a lab
	// holds it from its choice until its bridge has the gateway address,
	// which is what the next lab looks at.
	lockPath = "/run/cellkit-netlab.lock"
	// maxHosts bounds the outer veth names (PREFIX-h999).
	maxHosts = 999
)

// DefaultPool is where a lab without Config.Subnet takes its /24.
var DefaultPool = netip.MustParsePrefix("10.77.0.0/16")

var (
	prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,9}$`)
	familyRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,5}$`)
	hostRE   = regexp.MustCompile(`^[a-z][a-z0-9]{0,15}$`)
)

// Config describes a lab. Zero values mean the defaults in brackets.
type Config struct {
	// Prefix starts every name the lab makes: at most 10 lower-case
	// letters and digits, starting with a letter [Family and 4 random hex
	// digits].
	Prefix string
	// Family starts a random prefix: labs of one family are swept together
	// by SweepStale. At most 6 lower-case letters and digits [ck].
	Family string
	// Subnet is the lab's IPv4 network, /16 to /29: the gateway (the
	// bridge, in the root namespace) takes its first address, the hosts the
	// next ones in order [the first /24 of DefaultPool that no interface of
	// the machine is on].
	Subnet netip.Prefix
	// StateDir keeps the lab's record, netlab-PREFIX.json [DefaultStateDir].
	StateDir string
	// Detached marks a lab that outlives the process that made it
	// (loadtest net up): SweepStale leaves it alone; only Sweep of its
	// prefix removes it.
	Detached bool
}

// DefaultConfig returns the defaults in brackets above; a random prefix
// and a free subnet are chosen by New.
func DefaultConfig() Config {
	return Config{Family: DefaultFamily, StateDir: DefaultStateDir}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Family == "" {
		c.Family = d.Family
	}
	if c.StateDir == "" {
		c.StateDir = d.StateDir
	}
	return c
}

// Options carry the lab's collaborators. The zero value is usable.
type Options struct {
	// Logger gets a line for each thing made or removed (debug) and for
	// what a sweep finds (info). Nil means none.
	Logger *slog.Logger
}

// withDefaults fills the nil collaborators that have a default: Logger
// (none).
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Lab is a bridge and the hosts on it. Its methods are safe for concurrent
// use.
type Lab struct {
	log       *slog.Logger
	statePath string

	mu     sync.Mutex
	st     State
	hosts  []*Host
	closed bool
}

// Available reports why this machine cannot run a lab (not root, no ip
// command, no network namespaces), or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	if _, err := ipPath(); err != nil {
		return err
	}
	if _, err := runIP("netns", "list"); err != nil {
		return fmt.Errorf("no network namespaces here: %w", err)
	}
	return nil
}

// New makes the lab's bridge, with the gateway address, and records the
// lab in its state file.
func New(cfg Config, opts Options) (*Lab, error) {
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	log := opts.Logger
	if !familyRE.MatchString(cfg.Family) {
		return nil, fmt.Errorf("netlab: family %q: want 1 to 6 lower-case letters and digits, starting with a letter", cfg.Family)
	}
	if cfg.Prefix != "" && !prefixRE.MatchString(cfg.Prefix) {
		return nil, fmt.Errorf("netlab: prefix %q: want 1 to 10 lower-case letters and digits, starting with a letter", cfg.Prefix)
	}
	if cfg.Subnet.IsValid() {
		if err := checkSubnet(cfg.Subnet); err != nil {
			return nil, err
		}
		cfg.Subnet = cfg.Subnet.Masked()
	}
	if err := Available(); err != nil {
		return nil, fmt.Errorf("netlab: %w", err)
	}
	dir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("netlab: state dir: %w", err)
	}
	if cfg.Prefix == "" {
		if cfg.Prefix, err = freePrefix(cfg.Family, dir); err != nil {
			return nil, err
		}
	} else if ns, links, err := Leftovers(cfg.Prefix); err != nil {
		return nil, err
	} else if len(ns)+len(links) > 0 {
		return nil, fmt.Errorf("netlab: prefix %s is in use (%v): sweep it first", cfg.Prefix, slices.Concat(ns, links))
	}
	owner, err := self()
	if err != nil {
		return nil, err
	}
	l := &Lab{log: log.With("lab", cfg.Prefix), statePath: StatePath(dir, cfg.Prefix)}
	l.st = State{Prefix: cfg.Prefix, Bridge: cfg.Prefix + "-br", Owner: owner, Detached: cfg.Detached, CreatedAt: time.Now().UTC()}

	unlock, err := lockSubnets()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if l.st.Subnet, err = chooseSubnet(cfg.Subnet); err != nil {
		return nil, err
	}
	l.st.Gateway = l.st.Subnet.Addr().Next()
	if err := l.save(); err != nil {
		return nil, err
	}
	err = runIPs(
		[]string{"link", "add", "name", l.st.Bridge, "type", "bridge", "forward_delay", "0"},
		[]string{"addr", "add", netip.PrefixFrom(l.st.Gateway, l.st.Subnet.Bits()).String(), "dev", l.st.Bridge},
		[]string{"link", "set", l.st.Bridge, "up"},
	)
	if err != nil {
		if _, serr := Sweep(cfg.Prefix, dir); serr != nil {
			err = fmt.Errorf("%w (and cleaning up: %v)", err, serr)
		}
		return nil, fmt.Errorf("netlab: make the bridge: %w", err)
	}
	l.log.Debug("lab made", "subnet", l.st.Subnet, "bridge", l.st.Bridge, "gateway", l.st.Gateway, "state", l.statePath)
	return l, nil
}

// Open returns the lab recorded in STATEDIR/netlab-PREFIX.json, made by
// another process (loadtest net up): to look at its hosts, cut them apart
// or close it.
func Open(stateDir, prefix string, opts Options) (*Lab, error) {
	opts = opts.withDefaults()
	log := opts.Logger
	path := StatePath(stateDir, prefix)
	st, err := ReadState(path)
	if err != nil {
		return nil, err
	}
	l := &Lab{log: log.With("lab", prefix), statePath: path, st: *st}
	for _, h := range st.Hosts {
		l.hosts = append(l.hosts, &Host{lab: l, name: h.Name, netns: h.Netns, link: h.Link, addr: h.Addr})
	}
	return l, nil
}

// Prefix starts every name the lab makes.
func (l *Lab) Prefix() string { return l.st.Prefix }

// Subnet is the lab's network.
func (l *Lab) Subnet() netip.Prefix { return l.st.Subnet }

// Gateway is the bridge's address in the root namespace: how the hosts see
// the machine's own processes, and the source of their connections to the
// hosts.
func (l *Lab) Gateway() netip.Addr { return l.st.Gateway }

// Bridge is the bridge's name.
func (l *Lab) Bridge() string { return l.st.Bridge }

// StatePath is the lab's record.
func (l *Lab) StatePath() string { return l.statePath }

// State is a copy of the lab's record.
func (l *Lab) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.st
	st.Hosts, st.Procs = slices.Clone(st.Hosts), slices.Clone(st.Procs)
	return st
}

// Hosts are the lab's hosts in the order they were added.
func (l *Lab) Hosts() []*Host {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.hosts)
}

// Host returns the host named name.
func (l *Lab) Host(name string) (*Host, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.hosts {
		if h.name == name {
			return h, true
		}
	}
	return nil, false
}

// AddHost makes a host: a namespace PREFIX-NAME with lo up and eth0 at the
// next free address of the subnet, the other end of eth0's veth pair
// (PREFIX-hN) on the bridge. name is 1 to 16 lower-case letters and
// digits, starting with a letter.
func (l *Lab) AddHost(name string) (*Host, error) {
	if !hostRE.MatchString(name) {
		return nil, fmt.Errorf("netlab: host name %q: want 1 to 16 lower-case letters and digits, starting with a letter", name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("netlab: lab closed")
	}
	n := len(l.hosts) + 1
	addr := l.st.Gateway
	for range n {
		addr = addr.Next()
	}
	for _, h := range l.hosts {
		if h.name == name {
			return nil, fmt.Errorf("netlab: host %s exists", name)
		}
	}
	if n > maxHosts || !l.st.Subnet.Contains(addr) || !l.st.Subnet.Contains(addr.Next()) { // the last address is the broadcast
		return nil, fmt.Errorf("netlab: no address left in %s for host %s", l.st.Subnet, name)
	}
	h := &Host{lab: l, name: name, netns: l.st.Prefix + "-" + name, link: l.st.Prefix + "-h" + strconv.Itoa(n), addr: addr}
	l.st.Hosts = append(l.st.Hosts, HostState{Name: h.name, Netns: h.netns, Link: h.link, Addr: h.addr})
	if err := l.save(); err != nil {
		l.st.Hosts = l.st.Hosts[:len(l.st.Hosts)-1]
		return nil, err
	}
	err := runIPs(
		[]string{"netns", "add", h.netns},
		[]string{"link", "add", h.link, "type", "veth", "peer", "name", "eth0", "netns", h.netns},
		[]string{"link", "set", h.link, "master", l.st.Bridge},
		[]string{"link", "set", h.link, "up"},
		[]string{"-n", h.netns, "addr", "add", netip.PrefixFrom(addr, l.st.Subnet.Bits()).String(), "dev", "eth0"},
		[]string{"-n", h.netns, "link", "set", "eth0", "up"},
		[]string{"-n", h.netns, "link", "set", "lo", "up"},
	)
	if err != nil {
		_, _ = runIP("link", "del", h.link) // undoing a half-made host: Sweep removes what is left
		_, _ = runIP("netns", "del", h.netns)
		l.st.Hosts = l.st.Hosts[:len(l.st.Hosts)-1]
		_ = l.save()
		return nil, fmt.Errorf("netlab: add host %s: %w", name, err)
	}
	l.hosts = append(l.hosts, h)
	l.log.Debug("host added", "host", name, "netns", h.netns, "addr", addr, "link", h.link)
	return h, nil
}

// Close kills every process in the lab's namespaces (and those recorded),
// removes the namespaces, the veths and the bridge, then the state file. A
// second Close does nothing.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	swept, err := Sweep(l.st.Prefix, filepath.Dir(l.statePath))
	l.log.Debug("lab closed", "killed", swept.Killed, "namespaces", len(swept.Namespaces), "links", len(swept.Links))
	return err
}

// save replaces the state file; l.mu is held or l is not shared yet.
func (l *Lab) save() error {
	return writeState(l.statePath, &l.st)
}

// freePrefix draws FAMILY + 4 hex digits until no state file and nothing of
// the machine has that prefix.
func freePrefix(family, dir string) (string, error) {
	for range 50 {
		b := make([]byte, 2)
		rand.Read(b)
		p := family + hex.EncodeToString(b)
		if _, err := os.Stat(StatePath(dir, p)); err == nil {
			continue
		}
		ns, links, err := Leftovers(p)
		if err != nil {
			return "", err
		}
		if len(ns)+len(links) == 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("netlab: no free prefix in family %s: sweep it", family)
}

func checkSubnet(p netip.Prefix) error {
	if !p.Addr().Is4() || p.Bits() < 16 || p.Bits() > 29 {
		return fmt.Errorf("netlab: subnet %s: want an IPv4 network from /16 to /29", p)
	}
	return nil
}

// chooseSubnet returns want if no interface of the machine is on it, else
// (want unset) the first /24 of DefaultPool that none is on. The caller
// holds the subnet lock.
func chooseSubnet(want netip.Prefix) (netip.Prefix, error) {
	used, err := usedPrefixes()
	if err != nil {
		return netip.Prefix{}, err
	}
	if want.IsValid() {
		for _, u := range used {
			if u.Overlaps(want) {
				return netip.Prefix{}, fmt.Errorf("netlab: subnet %s overlaps %s, on an interface of this machine", want, u)
			}
		}
		return want, nil
	}
	if p, ok := pickSubnet(DefaultPool, 24, used); ok {
		return p, nil
	}
	return netip.Prefix{}, fmt.Errorf("netlab: every /24 of %s is in use: sweep old labs", DefaultPool)
}

// pickSubnet returns the first /bits of pool that overlaps none of used.
func pickSubnet(pool netip.Prefix, bits int, used []netip.Prefix) (netip.Prefix, bool) {
	step := uint32(1) << (32 - bits)
	base := pool.Masked().Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	for i := uint32(0); i < 1<<(bits-pool.Bits()); i++ {
		v := start + i*step
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits)
		if !slices.ContainsFunc(used, p.Overlaps) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// usedPrefixes are the IPv4 networks of the root namespace's interfaces.
func usedPrefixes() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("netlab: list addresses: %w", err)
	}
	var used []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		p, err := netip.ParsePrefix(n.String())
		if err == nil && p.Addr().Is4() {
			used = append(used, p.Masked())
		}
	}
	return used, nil
}

// lockSubnets takes the machine-wide lock on the choice of subnets.
func lockSubnets() (func(), error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("netlab: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("netlab: lock %s: %w", lockPath, err)
	}
	return func() { f.Close() }, nil
}
