package netlab_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/netlab"
	"github.com/cellkit/cellkit/internal/netlab/netlabtest"
	"github.com/cellkit/cellkit/internal/testkit"
)

// The test binary doubles as the programs the tests run inside hosts:
// NETLAB_HELPER=listen|dial|crash (see helper).
func TestMain(m *testing.M) {
	if mode := os.Getenv("NETLAB_HELPER"); mode != "" {
		os.Exit(helper(mode))
	}
	testkit.VerifyTestMain(m)
}

// helper runs one of the test's programs:
//   - listen: accept on $NETLAB_ADDR and answer "pong" to each connection;
//     prints "ready" once listening;
//   - dial: connect to $NETLAB_ADDR within $NETLAB_TIMEOUT and print the
//     answer; exit 1 if that fails;
//   - crash: make a lab of family $NETLAB_FAMILY (detached if
//     $NETLAB_DETACHED) with a host running sleep, print its prefix and the
//     sleeper's pid, and exit without closing it.
func helper(mode string) int {
	addr := os.Getenv("NETLAB_ADDR")
	switch mode {
	case "listen":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Println("ready")
		for {
			c, err := ln.Accept()
			if err != nil {
				return 1
			}
			io.WriteString(c, "pong\n")
			c.Close()
		}
	case "dial":
		timeout, _ := time.ParseDuration(os.Getenv("NETLAB_TIMEOUT"))
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Print(line)
		return 0
	case "crash":
		lab, err := netlab.New(netlab.Config{Family: os.Getenv("NETLAB_FAMILY"), Detached: os.Getenv("NETLAB_DETACHED") != ""}, netlab.Options{})
		if err != nil {
			fmt.Println(err)
			return 1
		}
		h, err := lab.AddHost("a")
		if err != nil {
			fmt.Println(err)
			return 1
		}
		sleep, _ := exec.LookPath("sleep")
		c, err := h.Start(devstack.Process{Name: "sleeper", Bin: sleep, Args: []string{"300"}, Log: os.DevNull})
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Println(lab.Prefix(), c.PID)
		return 0
	}
	fmt.Println("unknown helper", mode)
	return 2
}

// helperCmd runs the test binary as a helper inside h (in the root
// namespace if h is nil).
func helperCmd(ctx context.Context, h *netlab.Host, env ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if h == nil {
		cmd = exec.CommandContext(ctx, os.Args[0])
	} else {
		cmd = h.Command(ctx, os.Args[0])
	}
	// A -race binary otherwise sleeps a second at a clean exit.
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	return cmd
}

// listen runs a listener on h's address and port until the test ends.
func listen(t *testing.T, h *netlab.Host, port int) string {
	t.Helper()
	addr := h.HostPort(port)
	cmd := helperCmd(context.Background(), h, "NETLAB_HELPER=listen", "NETLAB_ADDR="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(l)
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		if l != "ready" {
			t.Fatalf("listener on %s in %s: %q", addr, h.Name(), l)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("listener on %s in %s not ready within 10s", addr, h.Name())
	}
	return addr
}

// dial connects from inside h to addr within timeout and expects "pong".
func dial(h *netlab.Host, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	out, err := helperCmd(ctx, h, "NETLAB_HELPER=dial", "NETLAB_ADDR="+addr, "NETLAB_TIMEOUT="+timeout.String()).Output()
	if err != nil {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	if got := string(bytes.TrimSpace(out)); got != "pong" {
		return fmt.Errorf("answer %q", got)
	}
	return nil
}

// dialRoot connects from the root namespace.
func dialRoot(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "pong\n" {
		return fmt.Errorf("answer %q", line)
	}
	return nil
}

func twoHosts(t *testing.T) (*netlab.Lab, *netlab.Host, *netlab.Host) {
	t.Helper()
	lab := netlabtest.New(t)
	a, err := lab.AddHost("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := lab.AddHost("b")
	if err != nil {
		t.Fatal(err)
	}
	return lab, a, b
}

// The dial timeout of the cut and unplugged checks: a refused or
// blackholed connection must fail within it.
const shortDial = 500 * time.Millisecond

func TestHostsTalk(t *testing.T) {
	lab, a, b := twoHosts(t)
	gw := lab.Subnet().Addr().Next()
	if lab.Gateway() != gw || a.Addr() != gw.Next() || b.Addr() != gw.Next().Next() {
		t.Errorf("gateway %v, a %v, b %v; want the subnet %v's first three addresses", lab.Gateway(), a.Addr(), b.Addr(), lab.Subnet())
	}
	for _, name := range []string{lab.Bridge(), a.Link(), b.Link()} {
		if !strings.HasPrefix(name, lab.Prefix()+"-") || len(name) > 15 {
			t.Errorf("link %q: want %s-..., at most 15 bytes", name, lab.Prefix())
		}
	}
	if a.Netns() != lab.Prefix()+"-a" {
		t.Errorf("namespace %q", a.Netns())
	}
	aAddr, bAddr := listen(t, a, 7001), listen(t, b, 7001)
	if err := dial(b, aAddr, 5*time.Second); err != nil {
		t.Errorf("b → a: %v", err)
	}
	if err := dial(a, bAddr, 5*time.Second); err != nil {
		t.Errorf("a → b: %v", err)
	}
	if err := dialRoot(aAddr, 5*time.Second); err != nil {
		t.Errorf("root namespace → a: %v", err)
	}
	// Each host has its own loopback: a's listener is on its address only.
	if err := dial(b, "127.0.0.1:7001", shortDial); err == nil {
		t.Error("b reached a listener on its own loopback")
	}
	ls, err := a.Listeners()
	if err != nil {
		t.Fatal(err)
	}
	if want := (netlab.Listener{Proto: "tcp", Addr: netip.MustParseAddrPort(aAddr)}); !slices.Contains(ls, want) {
		t.Errorf("a's listeners = %v, want %v among them", ls, want)
	}
}

func TestCutAndHeal(t *testing.T) {
	lab, a, b := twoHosts(t)
	c, err := lab.AddHost("c")
	if err != nil {
		t.Fatal(err)
	}
	aAddr, bAddr := listen(t, a, 7001), listen(t, b, 7001)
	if err := a.Cut(b); err != nil {
		t.Fatal(err)
	}
	if err := b.Cut(a); err != nil { // again, from the other side: no error
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from *netlab.Host
		to   string
	}{{b, aAddr}, {a, bAddr}} {
		start := time.Now()
		err := dial(tc.from, tc.to, shortDial)
		if err == nil {
			t.Errorf("%s → %s got through the cut", tc.from.Name(), tc.to)
		}
		t.Logf("%s → %s while cut: %v after %v", tc.from.Name(), tc.to, err, time.Since(start).Round(time.Millisecond))
	}
	if err := dial(c, aAddr, 5*time.Second); err != nil {
		t.Errorf("c → a while a and b are cut: %v", err)
	}
	if err := dialRoot(aAddr, 5*time.Second); err != nil {
		t.Errorf("root namespace → a while a and b are cut: %v", err)
	}
	if cuts, err := a.Cuts(); err != nil || !slices.Equal(cuts, []netip.Addr{b.Addr()}) {
		t.Errorf("a.Cuts() = %v, %v; want [%v]", cuts, err, b.Addr())
	}

	if err := a.Heal(b); err != nil {
		t.Fatal(err)
	}
	if err := a.Heal(b); err != nil {
		t.Errorf("healing a healed pair: %v", err)
	}
	if err := dial(b, aAddr, 5*time.Second); err != nil {
		t.Errorf("b → a after Heal: %v", err)
	}
	if err := dial(a, bAddr, 5*time.Second); err != nil {
		t.Errorf("a → b after Heal: %v", err)
	}
	if cuts, err := b.Cuts(); err != nil || len(cuts) != 0 {
		t.Errorf("b.Cuts() after Heal = %v, %v", cuts, err)
	}
	if err := a.Cut(a); err == nil {
		t.Error("a.Cut(a) = nil, want an error")
	}
}

func TestLinkDownAndUp(t *testing.T) {
	_, a, b := twoHosts(t)
	aAddr := listen(t, a, 7001)
	if err := a.LinkDown(); err != nil {
		t.Fatal(err)
	}
	if up, err := a.LinkIsUp(); err != nil || up {
		t.Errorf("LinkIsUp after LinkDown = %v, %v", up, err)
	}
	if err := dial(b, aAddr, shortDial); err == nil {
		t.Error("b reached unplugged a")
	}
	if err := dialRoot(aAddr, shortDial); err == nil {
		t.Error("the root namespace reached unplugged a")
	}
	if err := a.LinkUp(); err != nil {
		t.Fatal(err)
	}
	if up, err := a.LinkIsUp(); err != nil || !up {
		t.Errorf("LinkIsUp after LinkUp = %v, %v", up, err)
	}
	var last error
	if !testkit.Poll(10*time.Second, func() bool { last = dial(b, aAddr, time.Second); return last == nil }) {
		t.Errorf("b → a after LinkUp: %v", last)
	}
	if err := dialRoot(aAddr, 5*time.Second); err != nil {
		t.Errorf("root namespace → a after LinkUp: %v", err)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	netlabtest.Require(t)
	lab, err := netlab.New(netlab.Config{Family: netlabtest.Family}, netlab.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lab.Close() }) // if the test fails before its own Close
	a, err := lab.AddHost("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lab.AddHost("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := lab.AddHost("a"); err == nil {
		t.Error("a second host a was made")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	child, err := a.Start(devstack.Process{Name: "sleeper", Bin: sleep, Args: []string{"300"}, Log: filepath.Join(t.TempDir(), "sleeper.log")})
	if err != nil {
		t.Fatal(err)
	}
	cmd := a.Command(context.Background(), sleep, "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	testkit.WaitFor(t, 5*time.Second, "both processes inside a", func() bool {
		pids, _ := a.PIDs()
		return len(pids) == 2
	})
	st, err := netlab.ReadState(lab.StatePath())
	if err != nil || len(st.Hosts) != 2 || len(st.Procs) != 1 || st.Procs[0].PID != child.PID || st.Owner.PID != os.Getpid() {
		t.Fatalf("state = %+v, %v; want 2 hosts, the sleeper and this process as owner", st, err)
	}

	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	netlabtest.AssertGone(t, lab.Prefix())
	select {
	case <-child.Exited():
	case <-time.After(5 * time.Second):
		t.Error("the process Start started outlived Close")
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Error("the process of Command outlived Close")
	}
	if _, err := os.Stat(lab.StatePath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file after Close: %v", err)
	}
	if err := lab.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := lab.AddHost("c"); err == nil {
		t.Error("AddHost after Close succeeded")
	}
}

// crashFamily is the family of the labs TestSweepStaleAfterACrash makes
// and leaves as crashed: every test that needs a lab sweeps the stale
// labs of netlabtest.Family first (netlabtest.Require), and one running
// in another package's test process at the same time would sweep these
// before the test looks at them.
const crashFamily = "ckc"

// crashLab runs a process that makes a lab of crashFamily with a sleeping
// process in it and exits without closing it; it returns the lab's prefix
// and the sleeper's pid.
func crashLab(t *testing.T, detached bool) (string, int) {
	t.Helper()
	env := []string{"NETLAB_HELPER=crash", "NETLAB_FAMILY=" + crashFamily}
	if detached {
		env = append(env, "NETLAB_DETACHED=1")
	}
	out, err := helperCmd(context.Background(), nil, env...).Output()
	f := strings.Fields(string(out))
	if err != nil || len(f) != 2 {
		t.Fatalf("crashing helper: %v: %s", err, out)
	}
	pid, _ := strconv.Atoi(f[1])
	t.Cleanup(func() { netlab.Sweep(f[0], netlab.DefaultStateDir) })
	return f[0], pid
}

func TestSweepStaleAfterACrash(t *testing.T) {
	netlabtest.Require(t)
	mine, err := netlab.New(netlab.Config{Family: crashFamily}, netlab.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlabtest.Close(t, mine) })
	if _, err := mine.AddHost("a"); err != nil {
		t.Fatal(err)
	}
	crashed, sleeper := crashLab(t, false)
	detached, detachedSleeper := crashLab(t, true)
	// A lab without its record: known by the names alone.
	unrecorded, unrecordedSleeper := crashLab(t, false)
	if err := os.Remove(netlab.StatePath(netlab.DefaultStateDir, unrecorded)); err != nil {
		t.Fatal(err)
	}
	if !devstack.Alive(sleeper) || !devstack.Alive(detachedSleeper) || !devstack.Alive(unrecordedSleeper) {
		t.Fatal("the crashed labs' sleepers do not run")
	}

	sw, err := netlab.SweepStale(crashFamily, netlab.DefaultStateDir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sw.Prefixes, crashed) || !slices.Contains(sw.Killed, sleeper) {
		t.Errorf("swept %+v, want lab %s and pid %d", sw, crashed, sleeper)
	}
	if !slices.Contains(sw.Prefixes, unrecorded) || !slices.Contains(sw.Killed, unrecordedSleeper) {
		t.Errorf("swept %+v, want lab %s and pid %d (no record)", sw, unrecorded, unrecordedSleeper)
	}
	netlabtest.AssertGone(t, crashed)
	netlabtest.AssertGone(t, unrecorded)
	testkit.WaitFor(t, 5*time.Second, "the crashed labs' sleepers to be gone", func() bool {
		return !devstack.Alive(sleeper) && !devstack.Alive(unrecordedSleeper)
	})
	for _, p := range []string{mine.Prefix(), detached} {
		if slices.Contains(sw.Prefixes, p) {
			t.Errorf("SweepStale swept %s (live or detached)", p)
		}
		if ns, _, _ := netlab.Leftovers(p); len(ns) == 0 {
			t.Errorf("lab %s lost its namespaces", p)
		}
	}

	// A detached lab goes by Sweep of its prefix.
	sw, err = netlab.Sweep(detached, netlab.DefaultStateDir)
	if err != nil {
		t.Fatal(err)
	}
	netlabtest.AssertGone(t, detached)
	if !slices.Contains(sw.Killed, detachedSleeper) {
		t.Errorf("Sweep killed %v, want %d among them", sw.Killed, detachedSleeper)
	}
	if _, err := os.Stat(netlab.StatePath(netlab.DefaultStateDir, detached)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file after Sweep: %v", err)
	}
}
