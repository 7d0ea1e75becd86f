package netstack

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/flagenv"
	"github.com/cellkit/cellkit/internal/netlab"
)

const usage = `loadtest net up|down|status [--dir DIR]: cellkit on a network lab, each process on a host
(network namespace) of its own; needs root. 'loadtest net up -h' lists the flags.`

// Command is `loadtest net SUBCOMMAND`: args are the subcommand and its
// flags.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, usage)
		return nil
	}
	sub := args[0]
	fs := flag.NewFlagSet("loadtest net "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := DefaultConfig()
	fs.StringVar(&cfg.Dir, "dir", cfg.Dir, "`DIR` keeping the stack's record (net.json), tokens, stores and logs")
	var subnet string
	switch sub {
	case "up":
		fs.IntVar(&cfg.Cells, "cells", cfg.Cells, "`N` cells, c1..cN (1..99)")
		fs.IntVar(&cfg.Instances, "instances", cfg.Instances, "`M` instances of each cell (1..5), each on a host of its own with a node of the cell's JetStream cluster")
		fs.StringVar(&cfg.Bin, "bin", cfg.Bin, "`DIR` holding consul, cell, router and agencysim (make build; make tools for consul)")
		fs.StringVar(&subnet, "subnet", "", "the lab's IPv4 `CIDR`, /16 to /29 (default: the first free /24 of "+netlab.DefaultPool.String()+")")
		fs.DurationVar(&cfg.ReadyWait, "ready-timeout", cfg.ReadyWait, "give up if the stack is not ready within `D`")
	case "down", "status":
	default:
		return fmt.Errorf("unknown net command %q: up, down or status", sub)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("loadtest net %s: unexpected arguments %q", sub, fs.Args())
	}
	if err := flagenv.Fill(fs, "loadtest", nil); err != nil {
		return err
	}
	switch sub {
	case "up":
		if cfg.Cells < 1 || cfg.Cells > 99 {
			return fmt.Errorf("--cells %d: want 1 to 99", cfg.Cells)
		}
		if cfg.Instances < 1 || cfg.Instances > 5 {
			return fmt.Errorf("--instances %d: want 1 to 5", cfg.Instances)
		}
		if subnet != "" {
			p, err := netip.ParsePrefix(subnet)
			if err != nil {
				return fmt.Errorf("--subnet %q: want an IPv4 CIDR such as 10.77.5.0/24", subnet)
			}
			cfg.Lab.Subnet = p
		}
		st, err := Up(ctx, cfg, Options{Progress: stderr})
		if err != nil {
			return err
		}
		writeBanner(stdout, st, cfg.Dir)
		return nil
	case "down":
		sw, err := Down(ctx, cfg.Dir, func(p devstack.Process, how string) {
			fmt.Fprintf(stdout, "%-10s pid %-7d %s\n", p.Name, p.PID, how)
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Removed lab %s: %d namespaces, %d links", strings.Join(sw.Prefixes, ", "), len(sw.Namespaces), len(sw.Links))
		if len(sw.Killed) > 0 {
			fmt.Fprintf(stdout, "; killed %d processes left in it", len(sw.Killed))
		}
		fmt.Fprintf(stdout, ". Logs kept in %s.\n", filepath.Join(cfg.Dir, "logs"))
		return nil
	}
	return status(ctx, cfg.Dir, stdout)
}

// writeBanner says what runs where and how to use it.
func writeBanner(w io.Writer, st *Stack, dir string) {
	fmt.Fprintf(w, "cellkit is up on network lab %s (%s, gateway %s on bridge %s):\n\n", st.Lab.Prefix, st.Lab.Subnet, st.Lab.Gateway, st.Lab.Bridge)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  HOST\tADDRESS\tPROCESS\tLISTENS ON")
	for _, h := range st.Hosts {
		host, addr := h.Name, h.Addr.String()
		for _, p := range processesOn(st, h) {
			var as []string
			for _, k := range slices.Sorted(maps.Keys(p.Addrs)) {
				if k != "cell" {
					as = append(as, k+" "+p.Addrs[k])
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", host, addr, p.Name, strings.Join(as, ", "))
			host, addr = "", ""
		}
	}
	tw.Flush()
	fmt.Fprintf(w, `
  registry    %s   (Consul ACL token in %s)
  routers     %s
  API key     %s   (kept in %s)
  admin token in %s (every admin API)

Try it:
  curl -s -H 'X-API-Key: %s' -H 'Content-Type: application/json' -d '{"user_id":"u-42","product":"credit_loan","amount":5000000,"priority":"high"}' %s/v1/inquiries
  CONSUL_HTTP_TOKEN=$(cat %s) ./bin/cellctl --registry %s --admin-token-file %s status
  ./bin/loadtest run --target %s --key %s --rate 50 --duration 10s
  ip netns exec %s-c1i1 ss -ltn   # inside a host

Status: ./bin/loadtest net status --dir %s
Stop:   ./bin/loadtest net down --dir %s
`, st.Registry, filepath.Join(dir, "consul-token"), strings.Join(st.Routers, ", "), st.APIKey, filepath.Join(dir, "router", "dev-key"),
		filepath.Join(dir, "admin-token"), st.APIKey, st.Router,
		filepath.Join(dir, "consul-token"), st.Registry, filepath.Join(dir, "admin-token"),
		st.Router, st.APIKey, st.Lab.Prefix, dir, dir)
}

// processesOn are the processes running on host h.
func processesOn(st *Stack, h netlab.HostState) []devstack.Process {
	var ps []devstack.Process
	for _, p := range st.Processes {
		if p.Netns == h.Netns {
			ps = append(ps, p)
		}
	}
	return ps
}

// status prints each host of the stack in dir: address, link, cuts, its
// process (alive, ready) and its bound sockets. It fails unless every
// process is alive and ready.
func status(ctx context.Context, dir string, w io.Writer) error {
	st, err := Read(dir)
	if err != nil {
		return fmt.Errorf("no stack in %s (%v): start one with 'loadtest net up --dir %s'", dir, err, dir)
	}
	lab, labErr := st.OpenLab(netlab.Options{})
	fmt.Fprintf(w, "Lab %s: %s, gateway %s on bridge %s; started %s\n", st.Lab.Prefix, st.Lab.Subnet, st.Lab.Gateway, st.Lab.Bridge, st.StartedAt.Format(time.RFC3339))
	if labErr != nil {
		fmt.Fprintf(w, "The lab's record cannot be read (%v): 'loadtest net down --dir %s' removes what is left.\n", labErr, dir)
	}
	fmt.Fprintf(w, "Registry %s; routers %s\n\n", st.Registry, strings.Join(st.Routers, ", "))
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tADDRESS\tLINK\tCUT FROM\tPROCESS\tPID\tALIVE\tREADY\tRESTARTS\tBOUND")
	bad, total := 0, 0
	for _, hs := range st.Hosts {
		link, cuts, bound := "-", "-", "-"
		if lab != nil {
			if h, ok := lab.Host(hs.Name); ok {
				link, cuts, bound = hostNet(h)
			}
		}
		ps := processesOn(st, hs)
		if len(ps) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\t%s\n", hs.Name, hs.Addr, link, cuts, bound)
		}
		for i, p := range ps {
			total++
			a := devstack.Alive(p.PID)
			r := a && devstack.Probe(ctx, hc, p.Ready)
			if !r {
				bad++
			}
			if i == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t", hs.Name, hs.Addr, link, cuts)
			} else {
				fmt.Fprint(tw, "\t\t\t\t")
				bound = ""
			}
			restarts := "-"
			if p.Supervisor != nil {
				if sv, err := devstack.ReadSupervision(p.Supervisor.State); err == nil {
					restarts = strconv.Itoa(sv.Restarts)
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", p.Name, p.PID, yesNo(a), yesNo(r), restarts, bound)
		}
	}
	tw.Flush()
	if bad > 0 {
		return fmt.Errorf("%d of %d processes not alive and ready (logs in %s)", bad, total, filepath.Join(dir, "logs"))
	}
	return nil
}

// hostNet describes a host's link (up, down), the hosts it is cut from
// and its bound sockets, grouped by address.
func hostNet(h *netlab.Host) (link, cuts, bound string) {
	link, cuts, bound = "?", "?", "?"
	if up, err := h.LinkIsUp(); err == nil {
		link = map[bool]string{true: "up", false: "down"}[up]
	}
	if cs, err := h.Cuts(); err == nil {
		cuts = "-"
		var names []string
		for _, a := range cs {
			names = append(names, a.String())
		}
		if len(names) > 0 {
			cuts = strings.Join(names, ",")
		}
	}
	if ls, err := h.Listeners(); err == nil {
		bound = describeListeners(ls)
	}
	return link, cuts, bound
}

// describeListeners groups sockets by address and protocol:
// "10.77.0.2 tcp/8300,8500 udp/8301; 127.0.0.1 tcp/4222".
func describeListeners(ls []netlab.Listener) string {
	if len(ls) == 0 {
		return "-"
	}
	byAddr := map[netip.Addr]map[string][]int{}
	for _, l := range ls {
		a := l.Addr.Addr()
		if byAddr[a] == nil {
			byAddr[a] = map[string][]int{}
		}
		byAddr[a][l.Proto] = append(byAddr[a][l.Proto], int(l.Addr.Port()))
	}
	addrs := slices.SortedFunc(maps.Keys(byAddr), netip.Addr.Compare)
	var parts []string
	for _, a := range addrs {
		s := a.String()
		if a.IsUnspecified() {
			s += " (ANY)"
		}
		for _, proto := range []string{"tcp", "udp"} {
			ports := byAddr[a][proto]
			if len(ports) == 0 {
				continue
			}
			slices.Sort(ports)
			var ps []string
			for _, p := range slices.Compact(ports) {
				ps = append(ps, strconv.Itoa(p))
			}
			s += " " + proto + "/" + strings.Join(ps, ",")
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
