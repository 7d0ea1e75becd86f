//go:build !faults

package intake

import "net/http"

// faultAccept does nothing without the tag "faults" (see faults.go).
func faultAccept(string, *http.Request) {}
