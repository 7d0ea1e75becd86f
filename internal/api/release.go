package api

// Release is what a process runs: its build and the settings that decide
// its behaviour. Two processes with the same ID run the same binary with
// the same settings; a changed flag is a new release, a changed address,
// identity or file path (where the process runs, not what it does) is not.
type Release struct {
	// ID is "<version>@<digest>", the digest over Binary and Config: the
	// value to compare.
	ID string `json:"id"`
	// Version is the build's version ("devel" when none was set).
	Version string `json:"version"`
	// Binary is the first 12 hex digits of the executable's SHA-256.
	Binary string `json:"binary"`
	// Config is the first 12 hex digits of the SHA-256 of the settings
	// that make the release (every flag's name and value, the placement
	// flags left out).
	Config string `json:"config"`
}
