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

//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package gnet

import "sync/atomic"

// Without io_uring (cellkit): every read and write is its own system call.

type batch struct{}

// Batched counts a loop's batched calls (none here).
type Batched struct {
	Calls, Reads, Writes atomic.Uint64
}

func (el *eventloop) startBatch()            {}
func (el *eventloop) stopBatch()             {}
func (b *batch) queue(*conn, []byte) bool    { return false }
func (b *batch) queuev(*conn, [][]byte) bool { return false }
