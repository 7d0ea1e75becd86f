//go:build !faults

package pipeline

// Faults is true in a build with the tag "faults" (see faults.go).
const Faults = false

func faultHook(string, string) {}
