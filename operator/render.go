package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/cellkit/cellkit/internal/operator"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
)

// render prints the objects the Cell in FILE (YAML, as applied: the
// API server's defaults are filled the same way) is made of, as the
// operator applies them to a cell it makes: the shared ones of its
// namespace, then its own.
func render(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("operator render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ns := fs.String("namespace", "", "the namespace of a Cell that names none")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("render: want one FILE, a Cell in YAML")
	}
	b, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	cell := &v1alpha1.Cell{}
	if err := yaml.UnmarshalStrict(b, cell); err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if cell.Namespace == "" {
		cell.Namespace = *ns
	}
	objs, err := operator.RenderAll(cell)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "---\n%s", y)
	}
	return nil
}
