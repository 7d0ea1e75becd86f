// Command terraform-provider-cellkit is the cellkit Terraform provider
// (internal/tfprovider), served to the terraform CLI as a plugin:
//
//	go build -o bin/terraform-provider-cellkit ./terraform
//
// terraform/README.md says how to point the CLI at a local build.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/cellkit/cellkit/internal/buildinfo"
	"github.com/cellkit/cellkit/internal/tfprovider"
)

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run with support for debuggers such as delve")
	flag.Parse()
	err := providerserver.Serve(context.Background(), tfprovider.New(buildinfo.Version()), providerserver.ServeOpts{
		Address: tfprovider.Address,
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err)
	}
}
