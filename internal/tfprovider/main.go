package tfprovider

import (
	"context"
	"flag"
	"log"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/cellkit/cellkit/internal/buildinfo"
)

// Main is the provider program's main (terraform/main.go): it serves the
// provider, as a plugin, to the terraform CLI that started the program.
// It is here rather than in package main so that this package's tests
// can run their own binary as the provider (testkit.RunAsProgram).
func Main() {
	var debug bool
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError) // what flag.Parse would do, without a test binary's flags
	fs.BoolVar(&debug, "debug", false, "run with support for debuggers such as delve")
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag ends the program
	err := providerserver.Serve(context.Background(), New(buildinfo.Version()), providerserver.ServeOpts{
		Address: Address,
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err)
	}
}
