// Command terraform-provider-cellkit is the cellkit Terraform provider
// (internal/tfprovider), served to the terraform CLI as a plugin:
//
//	go build -o bin/terraform-provider-cellkit ./terraform
//
// terraform/README.md says how to point the CLI at a local build.
package main

import "github.com/cellkit/cellkit/internal/tfprovider"

func main() { tfprovider.Main() }
