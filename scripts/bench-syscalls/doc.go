// Package benchsyscalls measures what a system call costs on the machine
// it runs on, and what the same socket operations cost batched through
// io_uring (the event loops' third_party/uring): the figures behind
// docs/decisions/router-io-uring.md.
//
//	go test -bench . -benchtime 2s ./scripts/bench-syscalls
package benchsyscalls
