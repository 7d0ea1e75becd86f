// Package layout holds the house to its plan: its test assigns every
// package under internal/ to a plane and checks that the imports between
// planes go the ways docs/decisions/planes.md allows. It has no code.
package layout
