// Package layout holds the house to its plan: its test assigns every
// package under internal/ to a plane and checks that the imports between
// planes go the ways docs/decisions/planes.md allows, and another holds
// third_party/gnet to gnet's release plus cellkit's series of patches
// (docs/decisions/router-gnet-patch.md). It has no code.
package layout
