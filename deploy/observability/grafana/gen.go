//go:build ignore

// gen writes the dashboards that package grafana builds into the current
// directory: run it with `go generate ./deploy/observability/grafana`.
package main

import (
	"fmt"
	"os"

	"github.com/cellkit/cellkit/deploy/observability/grafana"
	"github.com/cellkit/cellkit/internal/atomicfile"
)

func main() {
	files, err := grafana.Dashboards()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(1)
	}
	for _, f := range files {
		if err := atomicfile.WriteFile(f.Name, f.JSON, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "dashboards:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", f.Name)
	}
}
