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

// Package uring is the part of io_uring an event loop needs to make many
// socket reads and writes in one system call: a ring, receive and send
// operations that never wait (MSG_DONTWAIT: each completes during the
// call that submits it, with its result or EAGAIN, as a non-blocking
// read or write would), one io_uring_enter to run them all, and their
// results. Not safe for concurrent use: a ring belongs to one loop.
package uring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's structures (include/uapi/linux/io_uring.h).
type (
	sqOffsets struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOffsets struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
	params struct {
		sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
		resv                                                                   [3]uint32
		sq                                                                     sqOffsets
		cq                                                                     cqOffsets
	}
	sqe struct {
		opcode, flags  uint8
		ioprio         uint16
		fd             int32
		off, addr      uint64
		len, msgFlags  uint32
		userData       uint64
		bufIndex, pers uint16
		spliceFDIn     int32
		addr3, pad     uint64
	}
	cqe struct {
		userData uint64
		res      int32
		flags    uint32
	}
)

const (
	opSendmsg = 9
	opSend    = 26
	opRecv    = 27

	offSQRing = 0
	offSQEs   = 0x10000000

	enterGetEvents = 1
	featSingleMmap = 1
	setupSubmitAll = 1 << 7
)

var errRingFull = errors.New("uring: no free submission entry")

// Ring is an io_uring instance with its submission and completion queues
// mapped.
type Ring struct {
	fd      int
	mem     []byte // the rings (one mapping: IORING_FEAT_SINGLE_MMAP)
	sqeMem  []byte
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqArray []uint32
	sqes    []sqe
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    []cqe
	tail    uint32 // the next submission entry's index (not yet published)
	queued  uint32 // entries prepared since the last Submit
	entries uint32
	msgs    []unix.Msghdr // one per entry: a sendmsg's header lives until its Submit returns
}

// New sets up a ring of entries submission entries (a power of two; the
// completion queue is twice that).
func New(entries uint32) (*Ring, error) {
	// Every entry of a submission is run even if one fails to start
	// (IORING_SETUP_SUBMIT_ALL, Linux 5.18): its failure is its result.
	p := params{flags: setupSubmitAll}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &Ring{fd: int(fd), entries: p.sqEntries}
	if p.features&featSingleMmap == 0 {
		r.Close()
		return nil, errors.New("io_uring: the kernel maps its rings separately (before 5.4); not supported")
	}
	size := int(p.sq.array + p.sqEntries*4)
	if cq := int(p.cq.cqes + p.cqEntries*uint32(unsafe.Sizeof(cqe{}))); cq > size {
		size = cq
	}
	var err error
	if r.mem, err = unix.Mmap(r.fd, offSQRing, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.Close()
		return nil, fmt.Errorf("io_uring: map the rings: %w", err)
	}
	if r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.Close()
		return nil, fmt.Errorf("io_uring: map the submission entries: %w", err)
	}
	base := unsafe.Pointer(&r.mem[0])
	r.sqHead = (*uint32)(unsafe.Add(base, p.sq.head))
	r.sqTail = (*uint32)(unsafe.Add(base, p.sq.tail))
	r.sqMask = *(*uint32)(unsafe.Add(base, p.sq.ringMask))
	r.sqArray = unsafe.Slice((*uint32)(unsafe.Add(base, p.sq.array)), p.sqEntries)
	r.cqHead = (*uint32)(unsafe.Add(base, p.cq.head))
	r.cqTail = (*uint32)(unsafe.Add(base, p.cq.tail))
	r.cqMask = *(*uint32)(unsafe.Add(base, p.cq.ringMask))
	r.cqes = unsafe.Slice((*cqe)(unsafe.Add(base, p.cq.cqes)), p.cqEntries)
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	r.tail = atomic.LoadUint32(r.sqTail)
	r.msgs = make([]unix.Msghdr, p.sqEntries)
	return r, nil
}

// Entries is how many operations one Submit can run.
func (r *Ring) Entries() int { return int(r.entries) }

// Close unmaps the rings and closes the ring's descriptor.
func (r *Ring) Close() {
	if r.sqeMem != nil {
		_ = unix.Munmap(r.sqeMem)
		r.sqeMem = nil
	}
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}

// next returns the next free submission entry, zeroed, and its slot.
func (r *Ring) next() (*sqe, uint32, error) {
	if r.queued >= r.entries {
		return nil, 0, errRingFull
	}
	i := r.tail & r.sqMask
	s := &r.sqes[i]
	*s = sqe{}
	r.sqArray[i] = i
	r.tail++
	r.queued++
	return s, i, nil
}

// Recv prepares a receive into b from the socket fd that never waits; its
// result carries tag. b must stay untouched until Submit returns.
func (r *Ring) Recv(fd int, b []byte, tag uint64) error {
	s, _, err := r.next()
	if err != nil {
		return err
	}
	s.opcode, s.fd, s.userData = opRecv, int32(fd), tag
	s.addr, s.len = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))), uint32(len(b))
	s.msgFlags = unix.MSG_DONTWAIT
	return nil
}

// Send prepares a send of bs (one or more buffers) to the socket fd that
// never waits; its result carries tag. bs's buffers and the slice itself
// must stay untouched until Submit returns.
func (r *Ring) Send(fd int, bs [][]byte, iov []unix.Iovec, tag uint64) error {
	s, i, err := r.next()
	if err != nil {
		return err
	}
	s.fd, s.userData, s.msgFlags = int32(fd), tag, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL
	if len(bs) == 1 {
		s.opcode = opSend
		s.addr, s.len = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(bs[0])))), uint32(len(bs[0]))
		return nil
	}
	n := 0
	for _, b := range bs {
		if len(b) > 0 && n < len(iov) {
			iov[n].Base = unsafe.SliceData(b)
			iov[n].SetLen(len(b))
			n++
		}
	}
	m := &r.msgs[i]
	*m = unix.Msghdr{}
	if n > 0 {
		m.Iov = &iov[0]
	}
	m.SetIovlen(n)
	s.opcode = opSendmsg
	s.addr, s.len = uint64(uintptr(unsafe.Pointer(m))), 1
	return nil
}

// Submit runs the operations prepared since the last Submit, in one
// io_uring_enter, and calls done with each one's tag and result (bytes,
// or a negative errno). The operations never wait, so each completes
// during the call; Submit returns an error if one did not (and then
// waits for it: its buffers are the kernel's until it completes).
func (r *Ring) Submit(done func(tag uint64, res int32)) error {
	n := r.queued
	if n == 0 {
		return nil
	}
	r.queued = 0
	atomic.StoreUint32(r.sqTail, r.tail)
	for {
		consumed, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), 0, 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 || uint32(consumed) != n {
			// Entries left in the queue would run at a later
			// submission, over buffers reused by then: the ring
			// cannot be used any more.
			if errno != 0 {
				return fmt.Errorf("io_uring_enter: %w", errno)
			}
			// Those taken ran: their results are reported, so that
			// the caller redoes only the others.
			r.reap(done)
			return fmt.Errorf("io_uring_enter: %d of %d entries taken", consumed, n)
		}
		break
	}
	got := r.reap(done)
	if got == n {
		return nil
	}
	// An operation that should not have waited is still under way: wait
	// for it (its buffers must not be reused before), and say so.
	missing := n - got
	for missing > 0 {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, uintptr(missing), enterGetEvents, 0, 0)
		if errno != 0 && errno != unix.EINTR {
			return fmt.Errorf("io_uring_enter (waiting for %d operations): %w", missing, errno)
		}
		missing -= r.reap(done)
	}
	return fmt.Errorf("uring: %d of %d operations did not complete when submitted", n-got, n)
}

// reap hands the completions posted to done and returns how many.
func (r *Ring) reap(done func(tag uint64, res int32)) uint32 {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	var n uint32
	for ; head != tail; head++ {
		c := &r.cqes[head&r.cqMask]
		done(c.userData, c.res)
		n++
	}
	atomic.StoreUint32(r.cqHead, head)
	return n
}
