package kubenode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/devstack"
)

// stopGrace is how long a component has to stop on SIGTERM.
const stopGrace = 10 * time.Second

// Down stops the cluster in dir and removes what it made on this host:
// its processes and the pods' (every process in the kubelet's cgroups,
// every containerd shim of its socket), the mounts under Dir and Run, the
// CNI bridge and its links, the iptables rules of kube-proxy, the kubelet
// and the CNI, the
// kubelet's cgroups, the sysctls it changed (put back), and Dir but its
// logs. It works from the record when there is one, and from the fixed
// names when there is not (a crashed Up). It fails naming whatever is left
// (Leftovers).
func Down(ctx context.Context, cfg Config, opts Options) error {
	rec, err := ReadRecord(cfg.Dir)
	if err != nil && !strings.HasPrefix(err.Error(), "no cluster") {
		return err
	}
	if rec != nil {
		cfg.Run = rec.Run
		// The components in reverse order of start; the pods' processes
		// once the kubelet, which would start them again, is gone.
		for i := len(rec.Procs) - 1; i >= 0; i-- {
			p := rec.Procs[i]
			how, err := devstack.Stop(ctx, p, stopGrace)
			switch {
			case errors.Is(err, devstack.ErrNotRunning):
				how = "not running"
			case err != nil:
				return err
			}
			opts.say("%-24s pid %-7d %s", p.Name, p.PID, how)
			if p.Name == "kubelet" {
				if n, err := killPods(cfg); err != nil {
					return err
				} else if n > 0 {
					opts.say("%-24s %d processes killed", "pods", n)
				}
			}
		}
	}
	// What a crashed Up or a lost record leaves: the same, found by name.
	if _, err := killPods(cfg); err != nil {
		return err
	}
	if err := killStrays(cfg); err != nil {
		return err
	}
	if err := unmountUnder(cfg.Run, cfg.Dir); err != nil {
		return err
	}
	if err := removeNetwork(); err != nil {
		return err
	}
	if err := removeCgroups(); err != nil {
		return err
	}
	for _, f := range hostFiles(cfg) {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if rec != nil {
		for k, v := range rec.Sysctls {
			if err := writeSysctl(k, v); err != nil {
				return err
			}
		}
	}
	if err := os.RemoveAll(cfg.Run); err != nil {
		return err
	}
	if err := removeAllBut(cfg.Dir, "logs"); err != nil {
		return err
	}
	if left := Leftovers(cfg); len(left) > 0 {
		return fmt.Errorf("the cluster left: %s", strings.Join(left, "; "))
	}
	return nil
}

// Leftovers lists what of a cluster in cfg's directories is on this host:
// its programs running, processes in the kubelet's cgroups, mounts under
// Dir or Run, the bridge, iptables rules of kube-proxy or of the CNI
// network, the kubelet's cgroups, files in Dir but its logs. Empty after
// Down.
func Leftovers(cfg Config) []string {
	var left []string
	for _, pid := range strays(cfg) {
		left = append(left, fmt.Sprintf("process %d (%s)", pid, cmdline(pid)))
	}
	for _, pid := range podPIDs() {
		left = append(left, fmt.Sprintf("pod process %d (%s)", pid, cmdline(pid)))
	}
	for _, m := range mountsUnder(cfg.Run, cfg.Dir) {
		left = append(left, "mount "+m)
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		left = append(left, "link "+Bridge)
	}
	for _, r := range iptablesRules() {
		left = append(left, "iptables "+r)
	}
	for _, c := range cgroups() {
		left = append(left, "cgroup "+c)
	}
	for _, f := range hostFiles(cfg) {
		left = append(left, "file "+f)
	}
	if _, err := os.Stat(cfg.Run); err == nil {
		left = append(left, "directory "+cfg.Run)
	}
	if ents, err := os.ReadDir(cfg.Dir); err == nil {
		for _, e := range ents {
			if e.Name() != "logs" {
				left = append(left, "file "+filepath.Join(cfg.Dir, e.Name()))
			}
		}
	}
	return left
}

// killPods kills every process in the kubelet's cgroups and every
// containerd shim serving the cluster's containerd (a shim outlives
// containerd by design), and waits until they are gone. It returns how
// many it killed.
func killPods(cfg Config) (int, error) {
	pids := append(podPIDs(), shims(cfg)...)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL) // gone already is as good
	}
	return len(pids), waitGone(pids)
}

// killStrays kills the cluster's programs that no record names: those
// running a program of Bin, or containerd with the cluster's
// configuration.
func killStrays(cfg Config) error {
	pids := strays(cfg)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return waitGone(pids)
}

func waitGone(pids []int) error {
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for devstack.Alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("pid %d (%s) still runs 5s after SIGKILL", pid, cmdline(pid))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// procs are the pids of this host's processes.
func procs() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// strays are the processes running a program of cfg.Bin, or containerd
// or one of its shims with cfg.Run's socket or cfg.Dir's configuration.
func strays(cfg Config) []int {
	bin, _ := filepath.Abs(cfg.Bin)
	var pids []int
	for _, pid := range procs() {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		cl := cmdline(pid)
		switch {
		case bin != "" && strings.HasPrefix(exe, bin+string(filepath.Separator)):
		case strings.Contains(cl, "containerd") && (strings.Contains(cl, cfg.Run+"/") || strings.Contains(cl, cfg.Dir+"/")):
		default:
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// shims are the containerd shims of the cluster's socket.
func shims(cfg Config) []int {
	var pids []int
	for _, pid := range procs() {
		if cl := cmdline(pid); strings.Contains(cl, "containerd-shim") && strings.Contains(cl, cfg.Run+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cgroupRoot is where the host's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroups are the kubelet's pod cgroups (kubepods, with the cgroupfs
// driver) in every hierarchy, deepest first.
func cgroups() []string {
	var dirs []string
	tops, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", "kubepods*"))
	if more, _ := filepath.Glob(filepath.Join(cgroupRoot, "kubepods*")); len(more) > 0 {
		tops = append(tops, more...)
	}
	for _, top := range tops {
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// podPIDs are the processes in the kubelet's cgroups.
func podPIDs() []int {
	seen := map[int]bool{}
	var pids []int
	for _, dir := range cgroups() {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// removeCgroups removes the kubelet's cgroups, once empty.
func removeCgroups() error {
	var errs []error
	for _, dir := range cgroups() {
		if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("cgroup %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder are the mount points under any of dirs, deepest first.
func mountsUnder(dirs ...string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var ms []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		mp := unescapeMount(fs[4])
		for _, d := range dirs {
			if d != "" && (mp == d || strings.HasPrefix(mp, d+"/")) {
				ms = append(ms, mp)
				break
			}
		}
	}
	slices.SortFunc(ms, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return slices.Compact(ms)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount under dirs, deepest first (a network
// namespace's bind mount, a pod's secret volume, a container's root).
func unmountUnder(dirs ...string) error {
	for range 3 { // a mount propagated meanwhile is caught on the next pass
		ms := mountsUnder(dirs...)
		if len(ms) == 0 {
			return nil
		}
		for _, m := range ms {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				return fmt.Errorf("unmount %s: %w", m, err)
			}
		}
	}
	if ms := mountsUnder(dirs...); len(ms) > 0 {
		return fmt.Errorf("still mounted: %s", strings.Join(ms, ", "))
	}
	return nil
}

// removeNetwork deletes the CNI bridge (its veths went with the pods'
// namespaces) and the cluster's iptables rules and chains, IPv4 and IPv6.
func removeNetwork() error {
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		if out, err := exec.Command("ip", "link", "del", Bridge).CombinedOutput(); err != nil {
			return fmt.Errorf("ip link del %s: %v: %s", Bridge, err, strings.TrimSpace(string(out)))
		}
	}
	var errs []error
	for _, family := range []string{"iptables", "ip6tables"} {
		errs = append(errs, removeRules(family))
	}
	return errors.Join(errs...)
}

// cniComment is how iptables-save shows the comment the bridge plugin
// puts on each of its rules: name: "NETWORK" id: "CONTAINER".
const cniComment = `name: \"` + Network + `\"`

// containsComment reports whether an iptables-save line carries the CNI
// network's comment.
func containsComment(l string) bool { return strings.Contains(l, cniComment) }

// ruleset is what of one family's rules is the cluster's, table by
// table: its chains (kube-proxy's and the kubelet's KUBE-…, the bridge
// plugin's CNI-… that its rules use) and its rules in the other chains.
type ruleset struct {
	chains map[string][]string   // table -> chains to flush and delete
	rules  map[string][][]string // table -> rules (iptables -A arguments, chain first) to delete
	lines  []string              // what iptables-save showed of them
}

// clusterRules reads family's rules (iptables-save) and picks the
// cluster's: lines naming a KUBE- chain or carrying the CNI network's
// comment.
func clusterRules(family string) (ruleset, error) {
	rs := ruleset{chains: map[string][]string{}, rules: map[string][][]string{}}
	save, err := lookPath(family + "-save")
	if err != nil {
		return rs, nil // no iptables: no rules
	}
	out, err := exec.Command(save).Output()
	if err != nil {
		return rs, fmt.Errorf("%s: %w", save, err)
	}
	return parseRules(family, string(out))
}

// parseRules picks the cluster's rules and chains from family's
// iptables-save output.
func parseRules(family, out string) (ruleset, error) {
	rs := ruleset{chains: map[string][]string{}, rules: map[string][][]string{}}
	ours := func(l string) bool { return strings.Contains(l, "KUBE-") || containsComment(l) }
	table := ""
	drop := map[string]bool{}
	var rules []struct {
		table string
		args  []string
	}
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, ":KUBE-"):
			name, _, _ := strings.Cut(l[1:], " ")
			drop[table+" "+name] = true
			rs.chains[table] = append(rs.chains[table], name)
			rs.lines = append(rs.lines, family+" "+table+" "+l)
		case strings.HasPrefix(l, "-A ") && ours(l):
			args, err := splitRule(strings.TrimPrefix(l, "-A "))
			if err != nil {
				return rs, err
			}
			rs.lines = append(rs.lines, family+" "+table+" "+l)
			for _, c := range []string{args[0], target(args)} {
				if strings.HasPrefix(c, "CNI-") && !drop[table+" "+c] {
					drop[table+" "+c] = true
					rs.chains[table] = append(rs.chains[table], c)
				}
			}
			rules = append(rules, struct {
				table string
				args  []string
			}{table, args})
		}
	}
	// The rules in chains that stay (a built-in chain's jump to ours):
	// those in our chains go with their chain.
	for _, r := range rules {
		if !drop[r.table+" "+r.args[0]] {
			rs.rules[r.table] = append(rs.rules[r.table], r.args)
		}
	}
	return rs, nil
}

// target is a rule's jump target (-j), "" for none.
func target(args []string) string {
	if i := slices.Index(args, "-j"); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// removeRules deletes the cluster's rules of family, then flushes and
// deletes its chains.
func removeRules(family string) error {
	rs, err := clusterRules(family)
	if err != nil || len(rs.lines) == 0 {
		return err
	}
	ipt, err := lookPath(family)
	if err != nil {
		return err
	}
	var errs []error
	run := func(args ...string) {
		if out, err := exec.Command(ipt, args...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %v: %s", family, strings.Join(args, " "), err, strings.TrimSpace(string(out))))
		}
	}
	for table, rules := range rs.rules {
		for _, r := range rules {
			run(append([]string{"-t", table, "-D"}, r...)...)
		}
	}
	for _, op := range []string{"-F", "-X"} { // every chain empty before any goes
		for table, chains := range rs.chains {
			for _, c := range chains {
				run("-t", table, op, c)
			}
		}
	}
	return errors.Join(errs...)
}

// iptablesRules are the cluster's iptables and ip6tables rules and chains,
// as iptables-save shows them.
func iptablesRules() []string {
	var lines []string
	for _, family := range []string{"iptables", "ip6tables"} {
		rs, err := clusterRules(family)
		if err != nil {
			lines = append(lines, err.Error())
		}
		lines = append(lines, rs.lines...)
	}
	return lines
}

// splitRule splits an iptables-save rule into arguments: fields, with
// double-quoted ones (a comment) unquoted.
func splitRule(s string) ([]string, error) {
	var args []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] != '"' {
			f, rest, _ := strings.Cut(s, " ")
			args, s = append(args, f), rest
			continue
		}
		var b strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			b.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, fmt.Errorf("unterminated quote in %q", s)
		}
		args, s = append(args, b.String()), s[i+1:]
	}
	return args, nil
}

// The fixed places the kubelet and the CNI library write outside the
// cluster's directories: the links to the containers' logs, and the
// results of the network's attachments.
const (
	containerLogLinks = "/var/log/containers"
	cniResults        = "/var/lib/cni/results"
)

// hostFiles are the cluster's files in those places: links into Dir, and
// results of the CNI network (NETWORK-CONTAINER-IFNAME).
func hostFiles(cfg Config) []string {
	var fs []string
	links, _ := os.ReadDir(containerLogLinks)
	for _, e := range links {
		p := filepath.Join(containerLogLinks, e.Name())
		if to, err := os.Readlink(p); err == nil && strings.HasPrefix(to, cfg.Dir+"/") {
			fs = append(fs, p)
		}
	}
	results, _ := os.ReadDir(cniResults)
	for _, e := range results {
		if strings.HasPrefix(e.Name(), Network+"-") {
			fs = append(fs, filepath.Join(cniResults, e.Name()))
		}
	}
	return fs
}

// removeAllBut removes dir's entries but keep.
func removeAllBut(dir, keep string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
