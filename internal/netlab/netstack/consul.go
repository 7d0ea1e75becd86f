package netstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/netlab"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// The map written into the lab's Consul (devstack.ConsulProcess).

// provision writes the map into Consul through control.Ensure, as
// cellctl would: init, then provision for each cell (at its first
// instance) and instance set for each instance. What each did goes to
// DIR/logs/setup.log.
func provision(ctx context.Context, st *Stack, hosts map[string]*netlab.Host) error {
	logf, err := os.OpenFile(filepath.Join(st.Dir, "logs", "setup.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	reg, err := registry.Open(registry.Config{URL: st.Registry, Token: st.ConsulToken}, registry.Options{})
	if err != nil {
		return err
	}
	defer reg.Close()
	const origin = "loadtest net up"
	ctl := control.New(reg, control.Config{Holder: control.Holder(origin), Origin: origin},
		control.Options{Note: func(n control.Note) { fmt.Fprintf(logf, "note: %s\n", n.Text) }})
	var cells []control.StackCell
	for _, c := range st.CellSet {
		sc := control.StackCell{ID: c.ID}
		for _, in := range c.Instances {
			h := hosts[in.Host]
			sc.Instances = append(sc.Instances, slotmap.Instance{ID: in.ID,
				Intake: "http://" + h.HostPort(cellIntake), Admin: "http://" + h.HostPort(cellAdmin)})
		}
		sc.Intake, sc.Admin = sc.Instances[0].Intake, sc.Instances[0].Admin
		cells = append(cells, sc)
	}
	return ctl.Ensure(ctx, control.EnsureChange{Agencies: devstack.Agencies, Cells: cells,
		Step: func(s control.Step) {
			if s.Result != nil {
				fmt.Fprintf(logf, "%s: map version %d (%s)\n", s.What, s.Result.Version, s.Result.Plan.Op)
			}
		}})
}
