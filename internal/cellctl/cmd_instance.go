package cellctl

import (
	"context"
	"flag"

	"github.com/cellkit/cellkit/internal/control"
)

// The instances of a cell that runs as several processes: the routers
// spread its calls over those in rotation.

func instanceSetCommand() *command {
	var intake, admin string
	c := &command{
		name:      "instance set",
		argsUsage: "CELL INSTANCE",
		section:   secMap,
		summary:   "add an instance to a cell, or change its URLs",
		help: `Adds INSTANCE (1-32 of [a-z0-9-]) to CELL with its intake and admin URLs,
or changes the URLs of an instance the cell has. The routers spread the
cell's calls over its instances in rotation; a new instance is in rotation.
No slot moves.`,
		examples: `cellctl instance set c1 i2 --intake http://10.0.2.5:8081 --admin http://10.0.2.5:9081`,
		minArgs:  2, maxArgs: 2,
		mutates: true,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&intake, "intake", "", "base `URL` of the instance's intake API (required for a new instance)")
			fs.StringVar(&admin, "admin", "", "base `URL` of the instance's admin API (required for a new instance)")
		},
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		id, inst := args[0], args[1]
		if intake == "" && admin == "" {
			return usagef("give --intake URL, --admin URL or both")
		}
		return x.applyAndReport(ctx, control.SetInstance(id, inst, intake, admin))
	}
	return c
}

// instanceStateCommand is instance drain or undrain.
func instanceStateCommand(drain bool) *command {
	name, summary, help := "instance drain", "take an instance out of the routers' rotation",
		`Takes INSTANCE of CELL out of the routers' rotation: its other instances
serve the cell's users. The instance keeps running (its queue is the cell's,
on the shared JetStream cluster). No slot moves. Undo with 'instance undrain'.`
	if !drain {
		name, summary, help = "instance undrain", "put a drained instance back in rotation",
			`Puts INSTANCE of CELL back in the routers' rotation. No slot moves.`
	}
	c := &command{
		name: name, argsUsage: "CELL INSTANCE", section: secMap, summary: summary, help: help,
		examples: "cellctl " + name + " c1 i2",
		minArgs:  2, maxArgs: 2, mutates: true,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		id, inst := args[0], args[1]
		return x.applyAndReport(ctx, control.SetInstanceRotation(id, inst, drain))
	}
	return c
}

func instanceRemoveCommand() *command {
	c := &command{
		name:      "instance remove",
		argsUsage: "CELL INSTANCE",
		section:   secMap,
		summary:   "remove a drained instance from a cell",
		help: `Removes INSTANCE from CELL. The instance must be drained first ('instance
drain'), so that no router sends it calls when it goes; a cell's last instance
cannot be removed (remove the cell). No slot moves.`,
		examples: `cellctl instance remove c1 i2`,
		minArgs:  2, maxArgs: 2, mutates: true,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		id, inst := args[0], args[1]
		return x.applyAndReport(ctx, control.RemoveInstance(id, inst))
	}
	return c
}
