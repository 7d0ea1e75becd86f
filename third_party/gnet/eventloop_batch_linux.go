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

package gnet

import (
	"errors"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	errorx "github.com/panjf2000/gnet/v2/pkg/errors"
	"github.com/panjf2000/gnet/v2/pkg/netpoll"
	"github.com/panjf2000/gnet/v2/pkg/queue"

	"github.com/cellkit/cellkit/third_party/uring"
)

// A loop's batched socket I/O (cellkit): unless netpoll.SyscallPerSocketIO,
// a loop reads the sockets a round of events found readable in one
// io_uring call before it dispatches the round, and what the round's
// callbacks and tasks wrote is queued on each connection and written, for
// all of them, in one io_uring call after the round. Every operation is
// non-blocking (it completes with EAGAIN rather than wait), so the
// results are those the loop's read and write system calls would have
// given, and handled the same way: a write the socket could not take
// whole waits for EPOLLOUT in the connection's outbound buffer.
//
// A batched operation belongs to the connection it was made for and to
// its round, never to a descriptor: its tag carries the submission's
// generation and the connection's place in it, and a result whose tag is
// not the current submission's, or whose connection has closed, applies
// to nothing; a read the round's dispatch did not take is handed over
// when the round ends (settle), or dropped with a connection that closed.
// So a later connection on the same descriptor never gets a byte read
// for an earlier one, nor its write result.

const (
	batchEntries = 64       // operations per io_uring call
	batchChunk   = 16 << 10 // bytes read per socket per round (level-triggered: the rest is read next round)
	batchIovecs  = 16       // buffers per batched write (the rest is written next round)
)

// Batched counts a loop's batched calls and the operations they carried.
type Batched struct {
	Calls, Reads, Writes atomic.Uint64
}

type batch struct {
	el     *eventloop
	ring   *uring.Ring
	slab   []byte  // read buffers, batchChunk per entry
	reads  []*conn // the round's reads, by tag
	writes []*conn // the flush's writes, by tag
	flushq []*conn // connections with writes queued this round
	iovs   [][]unix.Iovec
	gen    uint32 // the last submission's generation: the high half of its operations' tags
	stats  *Batched
	done   func(tag uint64, res int32)
	sent   func(tag uint64, res int32)
}

// startBatch sets up the loop's batch if asked for and possible; the
// loop then reads and writes through it until stopBatch.
func (el *eventloop) startBatch() {
	if netpoll.SyscallPerSocketIO.Load() || el.engine.opts.EdgeTriggeredIO {
		return
	}
	ring, err := uring.New(batchEntries)
	if err != nil {
		el.getLogger().Warnf("event-loop(%d): no batched socket I/O, a system call per read and write: %v", el.idx, err)
		return
	}
	b := &batch{el: el, ring: ring, slab: make([]byte, ring.Entries()*batchChunk), iovs: make([][]unix.Iovec, ring.Entries()), stats: &el.batched}
	for i := range b.iovs {
		b.iovs[i] = make([]unix.Iovec, batchIovecs)
	}
	b.done = b.readDone
	b.sent = b.writeDone
	if !el.poller.SetBatcher(b) {
		ring.Close()
		return
	}
	el.batch = b
}

// stopBatch ends batching: what is queued is written, and later writes
// go straight to their sockets.
func (el *eventloop) stopBatch() {
	b := el.batch
	if b == nil {
		return
	}
	b.Flush()
	el.poller.SetBatcher(nil)
	el.batch = nil
	b.ring.Close()
}

// failed ends batching after the ring failed: the loop goes on with a
// system call per read and write.
func (b *batch) failed(err error) {
	b.el.getLogger().Errorf("event-loop(%d): batched socket I/O failed, a system call per read and write from now on: %v", b.el.idx, err)
	b.el.poller.SetBatcher(nil)
	b.el.batch = nil
	b.ring.Close()
	for _, c := range b.flushq {
		b.el.flushOne(c)
	}
	b.flushq = nil
}

// Prepare reads, in one call, every connection the round found readable
// (when there are two or more); each connection's read then takes its
// result instead of reading.
func (b *batch) Prepare(events []unix.EpollEvent) {
	b.reads = b.reads[:0]
	for i := range events {
		if events[i].Events&(netpoll.ReadEvents|netpoll.ErrEvents) == 0 {
			continue
		}
		c := b.el.connections.getConn(int(events[i].Fd))
		if c == nil || !c.opened || c.isDatagram || c.pre {
			continue
		}
		b.reads = append(b.reads, c)
		if len(b.reads) == b.ring.Entries() {
			break
		}
	}
	if len(b.reads) < 2 {
		return // one read is one system call either way
	}
	b.gen++
	for i, c := range b.reads {
		_ = b.ring.Recv(c.fd, b.slab[i*batchChunk:(i+1)*batchChunk:(i+1)*batchChunk], b.tag(i))
	}
	b.stats.Calls.Add(1)
	b.stats.Reads.Add(uint64(len(b.reads)))
	if err := b.ring.Submit(b.done); err != nil {
		b.failed(err) // reads without a result are made by the loop
	}
}

func (b *batch) readDone(tag uint64, res int32) {
	i, ok := b.slot(tag, len(b.reads))
	if !ok || !b.reads[i].opened {
		return // not this submission's, or its connection closed: nobody's
	}
	c := b.reads[i]
	c.pre, c.preRes = true, res
	if res > 0 {
		c.preBuf = b.slab[i*batchChunk : i*batchChunk+int(res)]
	}
}

// tag is the tag of the i-th operation of the current submission.
func (b *batch) tag(i int) uint64 { return uint64(b.gen)<<32 | uint64(uint32(i)) }

// slot is the place, among n, of the operation a result's tag names, and
// whether the tag is the current submission's.
func (b *batch) slot(tag uint64, n int) (int, bool) {
	i := int(uint32(tag))
	return i, uint32(tag>>32) == b.gen && i < n
}

// settle ends the round's reads: a read its dispatch did not take (the
// connection's event stopped at its write step) is handed over now, while
// its buffer still holds it; one whose connection closed is dropped. No
// read outlives its round: the next round reads other connections into
// the same buffers.
func (b *batch) settle() {
	for i, c := range b.reads {
		b.reads[i] = nil
		if !c.pre {
			continue
		}
		if !c.opened || b.el.connections.getConn(c.fd) != c {
			c.pre, c.preBuf = false, nil
			continue
		}
		if err := b.el.read(c); errors.Is(err, errorx.ErrEngineShutdown) {
			_ = b.el.poller.Trigger(queue.HighPriority, func(any) error { return errorx.ErrEngineShutdown }, nil)
		}
	}
	b.reads = b.reads[:0]
}

// queue queues data for c's socket, to be written with the round's other
// writes; false when c's writes are not batched.
func (b *batch) queue(c *conn, data []byte) bool {
	if b == nil || c.isDatagram {
		return false
	}
	_, _ = c.outboundBuffer.Write(data)
	b.queued(c, len(data))
	return true
}

// queuev is queue for several buffers.
func (b *batch) queuev(c *conn, bs [][]byte) bool {
	if b == nil || c.isDatagram {
		return false
	}
	n, _ := c.outboundBuffer.Writev(bs)
	b.queued(c, n)
	return true
}

func (b *batch) queued(c *conn, n int) {
	c.unflushed += n
	if !c.queued {
		c.queued = true
		b.flushq = append(b.flushq, c)
	}
}

// Flush ends the round's reads (settle) and writes what the round queued:
// one connection's by a system call, more in one io_uring call. Writes
// made while handling the results (a connection closed, and what its
// closing wrote to others) are flushed too before Flush returns.
func (b *batch) Flush() {
	b.settle()
	for len(b.flushq) > 0 && b.el.batch == b {
		q := b.flushq
		b.flushq = nil
		b.flush(q)
		if b.flushq == nil {
			b.flushq = q[:0] // keep the array
		}
	}
}

func (b *batch) flush(q []*conn) {
	b.writes = b.writes[:0]
	for _, c := range q {
		if !c.queued || !c.opened || c.outboundBuffer.IsEmpty() {
			c.queued, c.unflushed = false, 0
			continue
		}
		if len(b.writes) == b.ring.Entries() {
			b.el.flushOne(c)
			continue
		}
		b.writes = append(b.writes, c)
	}
	if len(b.writes) == 1 {
		b.el.flushOne(b.writes[0])
		return
	}
	if len(b.writes) == 0 {
		return
	}
	b.gen++
	for i, c := range b.writes {
		iov, _ := c.outboundBuffer.Peek(-1)
		if len(iov) > batchIovecs {
			iov = iov[:batchIovecs]
		}
		c.sendRes, c.sendDone = 0, false
		_ = b.ring.Send(c.fd, iov, b.iovs[i], b.tag(i))
	}
	b.stats.Calls.Add(1)
	b.stats.Writes.Add(uint64(len(b.writes)))
	err := b.ring.Submit(b.sent)
	for i, c := range b.writes {
		b.writes[i] = nil
		c.queued, c.unflushed = false, 0
		if !c.opened {
			continue // closed by an earlier result's handling: its result applies to nothing
		}
		switch {
		case !c.sendDone:
			if err != nil {
				b.el.flushOne(c) // not run by the ring: written here
			}
		case c.sendRes >= 0:
			_, _ = c.outboundBuffer.Discard(int(c.sendRes))
			if !c.outboundBuffer.IsEmpty() {
				b.el.waitWritable(c)
			}
		case unix.Errno(-c.sendRes) == unix.EAGAIN:
			b.el.waitWritable(c)
		default:
			_ = b.el.close(c, os.NewSyscallError("write", unix.Errno(-c.sendRes)))
		}
	}
	if err != nil {
		b.failed(err)
	}
}

func (b *batch) writeDone(tag uint64, res int32) {
	if i, ok := b.slot(tag, len(b.writes)); ok {
		b.writes[i].sendRes, b.writes[i].sendDone = res, true
	}
}

// flushOne writes c's outbound buffer with a system call, and waits for
// EPOLLOUT if the socket did not take it all.
func (el *eventloop) flushOne(c *conn) {
	c.queued, c.unflushed = false, 0
	if !c.opened || c.outboundBuffer.IsEmpty() {
		return
	}
	iov, _ := c.outboundBuffer.Peek(-1)
	var n int
	var err error
	if len(iov) > 1 {
		if len(iov) > iovMax {
			iov = iov[:iovMax]
		}
		n, err = unix.Writev(c.fd, iov)
	} else {
		n, err = unix.Write(c.fd, iov[0])
	}
	switch err {
	case nil:
		_, _ = c.outboundBuffer.Discard(n)
		if !c.outboundBuffer.IsEmpty() {
			el.waitWritable(c)
		}
	case unix.EAGAIN:
		el.waitWritable(c)
	default:
		_ = el.close(c, os.NewSyscallError("write", err))
	}
}

// waitWritable has the poller report c writable: its outbound buffer is
// then written by the loop's write, as after a write that would block.
func (el *eventloop) waitWritable(c *conn) {
	if err := el.poller.ModReadWrite(&c.pollAttachment, false); err != nil {
		_ = el.close(c, os.NewSyscallError("epoll_ctl", err))
	}
}

// Batched returns the loop's batched-call counters (cellkit).
func (el *eventloop) Batched() *Batched { return &el.batched }
