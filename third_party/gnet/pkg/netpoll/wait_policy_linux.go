// Copyright (c) 2026 The cellkit authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package netpoll

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// SyscallPerSocketIO, when true as a loop starts, gives it what a kernel
// that refuses io_uring gives every loop: a read or write system call per
// socket (gnet's own way). Tests set it to run that path; nothing else
// does. False (the cellkit patch), a loop reads the sockets a round of
// events found readable in one io_uring call and writes what the round
// wrote in another, where the kernel allows io_uring (a loop that cannot
// set up a ring says so in its log and makes a system call per read and
// write).
var SyscallPerSocketIO atomic.Bool

// Batcher is told of each round of events before they are dispatched
// (Prepare) and flushed once the round and its tasks are done, before the
// poller waits again (Flush).
type Batcher interface {
	Prepare(events []unix.EpollEvent)
	Flush()
}
