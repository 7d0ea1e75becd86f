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

import "sync/atomic"

// ProbeBeforeWait, when true as a poller starts polling, keeps gnet's own
// way of waiting: after a round of events, epoll_wait again with a zero
// timeout, and only when that finds nothing, yield and block. False (the
// cellkit patch) yields after a round and blocks at once: one system call
// per wake-up instead of two when events come one at a time, the same one
// call when they come faster than a round takes (the blocking wait then
// returns at once).
var ProbeBeforeWait atomic.Bool
