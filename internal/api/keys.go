package api

// KeyEntry is one entry of a router's keys file (a JSON array of them),
// as the router reads it and 'router keys' and 'router keygen' write it.
type KeyEntry struct {
	// Client names the platform the key belongs to: 1–64 of [A-Za-z0-9._-].
	// A client may hold several keys (rotation); they share one rate limit.
	Client string `json:"client"`
	// KeySHA256 is the hex SHA-256 of the key. The key itself is never stored.
	KeySHA256 string `json:"key_sha256"`
	// Rate is the client's sustained limit in requests per second (> 0).
	Rate float64 `json:"rate"`
	// Burst is how many requests the client may send at once (≥ 1).
	Burst int `json:"burst"`
	// Lanes are the priorities the client may ask for in an inquiry's
	// "priority": "normal", "high" or both [normal]. Asking for another
	// is refused with 403 lane-forbidden.
	Lanes []string `json:"lanes,omitempty"`
	// DefaultLane is the lane of an inquiry that names none; one of Lanes
	// [normal if allowed, else high].
	DefaultLane string `json:"default_lane,omitempty"`
}
