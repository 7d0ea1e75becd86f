//go:build !faults

package pipeline

// faultHook does nothing without the tag "faults" (see faults.go).
func faultHook(string, string) {}

// faultStart does nothing without the tag "faults" (see faults.go).
func faultStart() {}
