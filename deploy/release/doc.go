// Package release builds and checks what cellkit ships beyond its
// binaries: the OCI images of its programs (package images, `make
// images`) and the Kubernetes manifests of deploy/kubernetes (this
// package's tests render and check them).
//
// It is a module of its own so that go-containerregistry, the Kubernetes
// API types and kustomize stay out of the main module's dependencies
// (docs/decisions/release-module.md).
package release
