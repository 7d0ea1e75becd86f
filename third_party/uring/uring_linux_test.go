// Copyright (c) 2026 The cellkit authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0

package uring

import (
	"bytes"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// pair is a connected loopback TCP pair's descriptors, non-blocking.
func pair(t *testing.T) (a, b int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	fd := func(c net.Conn) int {
		f, err := c.(*net.TCPConn).File()
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		n, err := unix.Dup(int(f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		if err := unix.SetNonblock(n, true); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Close(n) })
		return n
	}
	return fd(c), fd(s)
}

func ring(t *testing.T) *Ring {
	t.Helper()
	r, err := New(8)
	if err != nil {
		t.Skipf("io_uring not available here: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

type results map[uint64]int32

func (rs results) done(tag uint64, res int32) { rs[tag] = res }

// Sends and receives on several sockets run in one call, each with the
// result its system call would have had: bytes, EAGAIN for a socket with
// nothing to read (never a wait), 0 at the end of the stream.
func TestOneCallRunsEveryOperation(t *testing.T) {
	r := ring(t)
	a1, b1 := pair(t)
	a2, b2 := pair(t)
	a3, b3 := pair(t)
	iov := make([]unix.Iovec, 4)
	if err := r.Send(a1, [][]byte{[]byte("one")}, iov, 1); err != nil {
		t.Fatal(err)
	}
	if err := r.Send(a2, [][]byte{[]byte("tw"), nil, []byte("o!")}, make([]unix.Iovec, 4), 2); err != nil {
		t.Fatal(err)
	}
	got := results{}
	if err := r.Submit(got.done); err != nil {
		t.Fatal(err)
	}
	if got[1] != 3 || got[2] != 4 {
		t.Fatalf("sends: %v, want 3 and 4 bytes", got)
	}
	_ = unix.Shutdown(a3, unix.SHUT_WR)
	buf1, buf2, buf3, buf4 := make([]byte, 16), make([]byte, 16), make([]byte, 16), make([]byte, 16)
	for i, op := range []struct {
		fd  int
		buf []byte
	}{{b1, buf1}, {b2, buf2}, {b3, buf3}, {a1, buf4}} {
		if err := r.Recv(op.fd, op.buf, uint64(10+i)); err != nil {
			t.Fatal(err)
		}
	}
	got = results{}
	if err := r.Submit(got.done); err != nil {
		t.Fatal(err)
	}
	if got[10] != 3 || string(buf1[:3]) != "one" || got[11] != 4 || string(buf2[:4]) != "two!" {
		t.Errorf("receives: %v %q %q", got, buf1, buf2)
	}
	if got[12] != 0 {
		t.Errorf("a receive at the end of the stream: %d, want 0", got[12])
	}
	if got[13] != -int32(unix.EAGAIN) {
		t.Errorf("a receive with nothing to read: %d, want -EAGAIN (it must not wait)", got[13])
	}
}

// A send the socket cannot take whole takes what fits (or EAGAIN when
// nothing does), and never waits.
func TestASendToAFullSocketDoesNotWait(t *testing.T) {
	r := ring(t)
	a, b := pair(t)
	_ = unix.SetsockoptInt(a, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
	_ = unix.SetsockoptInt(b, unix.SOL_SOCKET, unix.SO_RCVBUF, 4096)
	big := bytes.Repeat([]byte("x"), 4<<20)
	iov := make([]unix.Iovec, 1)
	var total int
	var last int32
	for i := 0; i < 100; i++ {
		if err := r.Send(a, [][]byte{big}, iov, 7); err != nil {
			t.Fatal(err)
		}
		got := results{}
		if err := r.Submit(got.done); err != nil {
			t.Fatal(err)
		}
		if last = got[7]; last < 0 {
			break
		}
		total += int(last)
	}
	if last != -int32(unix.EAGAIN) || total == 0 || total >= len(big) {
		t.Fatalf("sends into a socket nobody reads: %d bytes taken, then %d; want part of %d, then -EAGAIN", total, last, len(big))
	}
}

// More operations than entries are refused before anything is submitted.
func TestARingHoldsItsEntries(t *testing.T) {
	r := ring(t)
	a, _ := pair(t)
	buf := make([]byte, 8)
	for i := 0; i < r.Entries(); i++ {
		if err := r.Recv(a, buf, uint64(i)); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	if err := r.Recv(a, buf, 99); err == nil {
		t.Fatal("one entry more than the ring holds was taken")
	}
	got := results{}
	if err := r.Submit(got.done); err != nil || len(got) != r.Entries() {
		t.Fatalf("%v, %d results; want %d", err, len(got), r.Entries())
	}
}
