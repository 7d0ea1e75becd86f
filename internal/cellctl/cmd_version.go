package cellctl

import (
	"context"
	"fmt"

	"github.com/cellkit/cellkit/internal/buildinfo"
)

func versionCommand() *command {
	c := &command{
		name:    "version",
		section: secInspect,
		summary: "print cellctl's version and build (also --version)",
		help: `Prints the version cellctl was built as, the source revision, the Go
toolchain and the platform; --json prints them as an object.`,
		examples: `cellctl version
cellctl --version
cellctl version --json`,
		maxArgs: 0,
	}
	c.run = func(_ context.Context, x *inv, _ []string) error {
		info := buildinfo.Get()
		if x.g.json {
			return writeJSON(x.out, info)
		}
		_, err := fmt.Fprintf(x.out, "cellctl %s\n", info)
		return err
	}
	return c
}
