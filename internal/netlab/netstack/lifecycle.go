package netstack

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/netlab"
)

// A lab stack after Up: stopped and swept (Down), one process killed or
// restarted (the drills).

// Down stops the stack recorded in dir (newest process first: SIGTERM,
// SIGKILL after devstack.StopGrace; report, if not nil, gets each
// outcome), then sweeps its lab and any other lab recorded in dir: every
// process in their namespaces, the namespaces, veths and bridge. It works
// after a crash of net up or of the processes, from whatever is recorded.
// The logs and stores stay in dir.
func Down(ctx context.Context, dir string, report func(p devstack.Process, how string)) (netlab.Swept, error) {
	var sw netlab.Swept
	dir, err := filepath.Abs(dir)
	if err != nil {
		return sw, err
	}
	labs := map[string]string{} // prefix: state dir
	st, err := Read(dir)
	switch {
	case err == nil:
		devstack.StopAll(ctx, st.Processes, devstack.StopGrace, report)
		if st.Lab.Prefix != "" {
			labs[st.Lab.Prefix] = st.Lab.StateDir
		}
	case !errors.Is(err, os.ErrNotExist):
		return sw, err
	}
	recorded, err := netlab.States(dir, "")
	if err != nil {
		return sw, err
	}
	for _, l := range recorded {
		labs[l.Prefix] = dir
	}
	if st == nil && len(labs) == 0 {
		return sw, fmt.Errorf("no network lab recorded in %s", dir)
	}
	for _, prefix := range slices.Sorted(maps.Keys(labs)) {
		s, err := netlab.Sweep(prefix, labs[prefix])
		sw.Prefixes = append(sw.Prefixes, prefix)
		sw.Killed = append(sw.Killed, s.Killed...)
		sw.Namespaces = append(sw.Namespaces, s.Namespaces...)
		sw.Links = append(sw.Links, s.Links...)
		if err != nil {
			return sw, err
		}
	}
	if err := os.Remove(StatePath(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return sw, err
	}
	return sw, nil
}

// sweepDir sweeps every lab recorded in dir (netlab-*.json).
func sweepDir(dir string) (netlab.Swept, error) {
	var sw netlab.Swept
	sts, err := netlab.States(dir, "")
	if err != nil {
		return sw, err
	}
	for _, st := range sts {
		s, err := netlab.Sweep(st.Prefix, dir)
		sw.Prefixes = append(sw.Prefixes, st.Prefix)
		sw.Killed = append(sw.Killed, s.Killed...)
		sw.Namespaces = append(sw.Namespaces, s.Namespaces...)
		sw.Links = append(sw.Links, s.Links...)
		if err != nil {
			return sw, err
		}
	}
	return sw, nil
}

// Kill sends SIGKILL to the process named name and waits until it is
// gone.
func (st *Stack) Kill(ctx context.Context, name string) error {
	p, ok := st.Process(name)
	if !ok {
		return fmt.Errorf("no process %q in the stack", name)
	}
	if _, err := devstack.Stop(ctx, *p, 0); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", name, p.PID, err)
	}
	return nil
}

// Restart starts the process named name again on its host, with the
// arguments and environment recorded, appending to its log, and records
// its new pid in DIR/net.json.
func (st *Stack) Restart(lab *netlab.Lab, name string) (*devstack.Child, error) {
	p, ok := st.Process(name)
	if !ok {
		return nil, fmt.Errorf("no process %q in the stack", name)
	}
	var host *netlab.Host
	for _, h := range lab.Hosts() {
		if h.Netns() == p.Netns {
			host = h
		}
	}
	if host == nil {
		return nil, fmt.Errorf("%s: no host of the lab has its namespace %s", name, p.Netns)
	}
	c, err := host.Start(*p)
	if err != nil {
		return nil, err
	}
	p.PID = c.PID
	return c, write(st)
}
