package netlab

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/devstack"
)

// netnsDir is where `ip netns add` mounts the namespaces it names.
const netnsDir = "/var/run/netns"

// sweepWait bounds how long a sweep waits for killed processes to go and
// for the kernel to drop the links of deleted namespaces.
const sweepWait = 10 * time.Second

// Swept is what a sweep removed.
type Swept struct {
	Prefixes   []string // the labs swept
	Killed     []int    // pids
	Namespaces []string
	Links      []string
}

func (s *Swept) add(o Swept) {
	s.Prefixes = append(s.Prefixes, o.Prefixes...)
	s.Killed = append(s.Killed, o.Killed...)
	s.Namespaces = append(s.Namespaces, o.Namespaces...)
	s.Links = append(s.Links, o.Links...)
}

// Empty reports whether nothing was removed.
func (s Swept) Empty() bool { return len(s.Killed)+len(s.Namespaces)+len(s.Links) == 0 }

// Sweep removes everything of the lab with prefix, whoever made it and
// whether or not it still runs: it kills the processes recorded in its
// state file in dir (if that program still has the pid) and every process
// in a namespace named PREFIX-*, deletes those namespaces and every link of
// the root namespace named PREFIX-* (the bridge and the veths), then the
// state file. It fails, keeping the state file, if something is left.
func Sweep(prefix, dir string) (Swept, error) {
	sw := Swept{Prefixes: []string{prefix}}
	if !prefixRE.MatchString(prefix) {
		return sw, fmt.Errorf("netlab: sweep: bad prefix %q", prefix)
	}
	path := StatePath(dir, prefix)
	if st, err := ReadState(path); err == nil {
		for _, p := range st.Procs {
			proc := devstack.Process{Name: p.Name, PID: p.PID, Bin: p.Bin, Netns: prefix + "-" + p.Host}
			if _, err := devstack.Stop(context.Background(), proc, 0); err == nil {
				sw.Killed = append(sw.Killed, p.PID)
			}
		}
	}
	namespaces, _, err := Leftovers(prefix)
	if err != nil {
		return sw, err
	}
	for _, ns := range namespaces {
		killed, err := killNetns(ns)
		sw.Killed = append(sw.Killed, killed...)
		if err != nil {
			return sw, err
		}
	}
	// The veths first (deleting one end deletes the pair at once), then
	// the namespaces: a namespace's own devices go only when the kernel
	// gets round to destroying it.
	_, links, err := Leftovers(prefix)
	if err != nil {
		return sw, err
	}
	slices.SortFunc(links, func(a, b string) int { // the bridge last
		return boolCmp(strings.HasSuffix(a, "-br"), strings.HasSuffix(b, "-br"))
	})
	var errs []error
	for _, l := range links {
		// Gone meanwhile (the other end of a veth deleted, or another
		// sweeper of the same lab: tests sweep stale labs as they start)
		// is what was wanted.
		if out, err := runIP("link", "del", l); err != nil && !strings.Contains(out, "Cannot find device") && !strings.Contains(out, "No such device") {
			errs = append(errs, err)
			continue
		}
		sw.Links = append(sw.Links, l)
	}
	for _, ns := range namespaces {
		if out, err := runIP("netns", "del", ns); err != nil && !strings.Contains(out, "No such file") {
			errs = append(errs, err)
			continue
		}
		sw.Namespaces = append(sw.Namespaces, ns)
	}
	var leftNS, leftLinks []string
	for deadline := time.Now().Add(sweepWait); ; time.Sleep(20 * time.Millisecond) {
		if leftNS, leftLinks, err = Leftovers(prefix); err != nil {
			return sw, err
		}
		if len(leftNS)+len(leftLinks) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(leftNS)+len(leftLinks) > 0 {
		errs = append(errs, fmt.Errorf("netlab: sweep %s: still there after %v: %s", prefix, sweepWait, strings.Join(slices.Concat(leftNS, leftLinks), ", ")))
		return sw, errors.Join(errs...)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		errs = append(errs, err)
	}
	return sw, errors.Join(errs...)
}

// SweepStale sweeps the labs of family whose owner has died without
// closing them: those recorded in dir with a dead owner, and those with
// namespaces or links named FAMILY+4 hex digits but no record in dir.
// Detached labs, and labs whose owner runs, are left alone.
func SweepStale(family, dir string) (Swept, error) {
	var sw Swept
	if !familyRE.MatchString(family) {
		return sw, fmt.Errorf("netlab: sweep: bad family %q", family)
	}
	re := regexp.MustCompile(`^(` + family + `[0-9a-f]{4})-`)
	prefixes := map[string]bool{}
	names, err := allNames()
	if err != nil {
		return sw, err
	}
	for _, n := range names {
		if m := re.FindStringSubmatch(n); m != nil {
			prefixes[m[1]] = true
		}
	}
	sts, err := States(dir, family)
	if err != nil {
		return sw, err
	}
	for _, st := range sts {
		if re.MatchString(st.Prefix + "-") {
			prefixes[st.Prefix] = true
		}
	}
	var errs []error
	for _, p := range slices.Sorted(maps.Keys(prefixes)) {
		st, err := ReadState(StatePath(dir, p))
		if err == nil && (st.Detached || st.Owner.Alive()) {
			continue
		}
		s, err := Sweep(p, dir)
		sw.add(s)
		errs = append(errs, err)
	}
	return sw, errors.Join(errs...)
}

// Leftovers are the namespaces and the root namespace's links named
// PREFIX-*.
func Leftovers(prefix string) (namespaces, links []string, err error) {
	if prefix == "" {
		return nil, nil, errors.New("netlab: leftovers of an empty prefix")
	}
	all, err := allNamespaces()
	if err != nil {
		return nil, nil, err
	}
	for _, n := range all {
		if strings.HasPrefix(n, prefix+"-") {
			namespaces = append(namespaces, n)
		}
	}
	if all, err = allLinks(); err != nil {
		return nil, nil, err
	}
	for _, n := range all {
		if strings.HasPrefix(n, prefix+"-") {
			links = append(links, n)
		}
	}
	return namespaces, links, nil
}

// allNames are every named namespace and every link of the root
// namespace.
func allNames() ([]string, error) {
	ns, err := allNamespaces()
	if err != nil {
		return nil, err
	}
	links, err := allLinks()
	return append(ns, links...), err
}

func allNamespaces() ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("netlab: list namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

func allLinks() ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("netlab: list links: %w", err)
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	return names, nil
}

// killNetns SIGKILLs every process in the namespace and waits until none
// is left.
func killNetns(ns string) ([]int, error) {
	var killed []int
	for deadline := time.Now().Add(sweepWait); ; time.Sleep(20 * time.Millisecond) {
		pids, err := netnsPIDs(ns)
		if err != nil {
			return killed, err
		}
		if len(pids) == 0 {
			return killed, nil
		}
		if time.Now().After(deadline) {
			return killed, fmt.Errorf("netlab: processes %v of namespace %s still run %v after SIGKILL", pids, ns, sweepWait)
		}
		for _, pid := range pids {
			if syscall.Kill(pid, syscall.SIGKILL) == nil && !slices.Contains(killed, pid) {
				killed = append(killed, pid)
			}
		}
	}
}

// netnsPIDs are the processes in a namespace (zombies are not: they have
// left it).
func netnsPIDs(ns string) ([]int, error) {
	out, err := runIP("netns", "pids", ns)
	if err != nil {
		if strings.Contains(out, "No such file") {
			return nil, nil
		}
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

var ipPath = sync.OnceValues(func() (string, error) {
	p, err := exec.LookPath("ip")
	if err != nil {
		return "", errors.New("no ip command (iproute2) in PATH")
	}
	return p, nil
})

// runIP runs ip with args and returns its output; the error holds the
// command and its output on one line.
func runIP(args ...string) (string, error) {
	ip, err := ipPath()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(ip, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, oneLine(string(out)))
	}
	return string(out), nil
}

// runIPs runs ip once for each list of arguments, stopping at the first
// error.
func runIPs(cmds ...[]string) error {
	for _, args := range cmds {
		if _, err := runIP(args...); err != nil {
			return err
		}
	}
	return nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
