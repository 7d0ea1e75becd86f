package api

import "time"

// MoveWindow is how long a cell remembers which cell owned a slot (or a
// user) before it. A client retrying a request with the same
// Idempotency-Key after the user's slot moved (a drain, a rebalance)
// reaches the new owner, which must not accept it a second time: within
// this window it asks the previous owner first. Whatever takes a cell
// away (the operator deleting one) keeps it answering for this long after
// its slots moved.
const MoveWindow = 10 * time.Minute
