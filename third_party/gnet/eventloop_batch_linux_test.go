// Copyright (c) 2026 The cellkit authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0

package gnet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fanOut, on the last of its clients' "go", writes each client a
// megabyte of its own in that one callback: the loop's flush writes
// them all in one batch, the sockets (small windows) take part of each,
// and the rest goes out as each becomes writable.
type fanOut struct {
	BuiltinEventEngine
	clients int
	ready   chan Engine
	mu      sync.Mutex
	conns   []Conn
	el      *eventloop
}

func (f *fanOut) OnBoot(e Engine) Action { f.ready <- e; return None }

// OnOpen gives the loop's side a small send buffer (no autotuning): the
// kernel takes a few kilobytes of each megabyte.
func (f *fanOut) OnOpen(c Conn) ([]byte, Action) {
	_ = c.SetWriteBuffer(8192)
	return nil, None
}

func (f *fanOut) OnTraffic(c Conn) Action {
	_, _ = c.Next(-1)
	f.conns = append(f.conns, c)
	if len(f.conns) < f.clients {
		return None
	}
	f.mu.Lock() // the test reads it from its own goroutine
	f.el = c.(*conn).loop
	f.mu.Unlock()
	for i, c := range f.conns {
		_, _ = c.Write(payload(i))
	}
	return None
}

func payload(i int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("%03d;", i)), 1<<20/4)
}

func TestABatchedWriteTheSocketsTakeInPartGoesOnWhole(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	const clients = 8
	f := &fanOut{clients: clients, ready: make(chan Engine, 1)}
	done := make(chan error, 1)
	go func() { done <- Run(f, "tcp://"+addr, WithNumEventLoop(1)) }()
	var eng Engine
	select {
	case eng = <-f.ready:
	case err := <-done:
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Stop(ctx)
		<-done
	}()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8192) })
	}}
	conns := make([]net.Conn, clients)
	for i := range conns {
		if conns[i], err = d.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
		if _, err := conns[i].Write([]byte("go")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // in this order: client i gets payload(i)
	}
	time.Sleep(100 * time.Millisecond) // the windows full, the rest waiting in the loop
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func(i int, c net.Conn) {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			want := payload(i)
			got := make([]byte, len(want))
			if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want) {
				t.Errorf("client %d: %v; its megabyte whole: %v", i, err, bytes.Equal(got, want))
			}
		}(i, c)
	}
	wg.Wait()
	f.mu.Lock()
	el := f.el
	f.mu.Unlock()
	if el.batch == nil {
		t.Skip("no io_uring here: the writes were not batched")
	}
	if w := el.batched.Writes.Load(); w < clients {
		t.Errorf("%d batched writes, want the %d of the one callback", w, clients)
	}
}

// recorder keeps every byte each connection was handed, under the name
// its first byte gives it, and runs hook (if set) on the loop when a
// connection is handed bytes.
type recorder struct {
	BuiltinEventEngine
	ready chan Engine
	mu    sync.Mutex
	got   map[byte][]byte
	conns map[byte]*conn
	hook  func(name byte)
}

func (r *recorder) OnBoot(e Engine) Action { r.ready <- e; return None }

func (r *recorder) OnTraffic(c Conn) Action {
	b, _ := c.Next(-1)
	r.mu.Lock()
	name, ok := c.Context().(byte)
	if !ok && len(b) > 0 {
		name = b[0]
		c.SetContext(name)
		r.conns[name] = c.(*conn)
	}
	r.got[name] = append(r.got[name], b...)
	hook := r.hook
	r.mu.Unlock()
	if hook != nil {
		hook(name)
	}
	return None
}

func (r *recorder) count(name byte) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[name])
}

// waitFor polls cond until it holds, or fails the test after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// inKernel is how many bytes wait in the socket fd's receive queue.
func inKernel(fd int) int {
	n, _ := unix.IoctlGetInt(fd, unix.SIOCINQ)
	return n
}

// TestAReadAheadIsNeverHandedToAnotherConnection: a read the loop's batch
// made for a connection is handed to that connection within its round,
// whatever the round's dispatch did (here the connection's write step
// failed — its epoll_ctl found it gone — so its read was skipped), or
// dropped with it: never kept past the round, when its buffer holds the
// next round's reads of other connections.
func TestAReadAheadIsNeverHandedToAnotherConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	r := &recorder{ready: make(chan Engine, 1), got: map[byte][]byte{}, conns: map[byte]*conn{}}
	done := make(chan error, 1)
	go func() { done <- Run(r, "tcp://"+addr, WithNumEventLoop(1)) }()
	var eng Engine
	select {
	case eng = <-r.ready:
	case err := <-done:
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Stop(ctx)
		<-done
	}()
	clients := map[byte]net.Conn{}
	for _, name := range []byte("abc") {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[name] = c
		if _, err := c.Write([]byte{name}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "connection "+string(name), func() bool { return r.count(name) == 1 })
	}
	a, b := r.conns['a'], r.conns['b']
	el := a.loop
	if el.batch == nil {
		t.Skip("no io_uring here: the reads are not batched")
	}
	send := func(name byte, n int) {
		t.Helper()
		fd := r.conns[name].fd
		before := inKernel(fd)
		if _, err := clients[name].Write(bytes.Repeat([]byte{name}, n)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the bytes in the socket", func() bool { return inKernel(fd) == before+n })
	}
	// onLoop runs f on the loop while the test sends what sends sends:
	// their readiness is all the next round sees, in their order.
	onLoop := func(f func(), sends func()) {
		t.Helper()
		started, finish := make(chan struct{}), make(chan struct{})
		if err := el.Execute(context.Background(), RunnableFunc(func(context.Context) error {
			close(started)
			<-finish
			f()
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		<-started
		sends()
		close(finish)
	}

	// A round reads a and b together; a's traffic takes b out of the
	// poller, so b's write step (b is asked for EPOLLOUT too) fails and
	// its read is not dispatched.
	var once sync.Once
	r.mu.Lock()
	r.hook = func(name byte) {
		if name == 'a' {
			once.Do(func() { _ = el.poller.Delete(b.fd) })
		}
	}
	r.mu.Unlock()
	onLoop(func() { _ = el.poller.ModReadWrite(&b.pollAttachment, false) }, func() { send('a', 100); send('b', 100) })
	waitFor(t, "a's bytes", func() bool { return r.count('a') == 101 })
	// The next batch of reads (a and c) fills the buffers again.
	onLoop(func() {}, func() { send('c', 100); send('a', 100) })
	waitFor(t, "a's and c's bytes", func() bool { return r.count('a') == 201 && r.count('c') == 101 })
	// b, back in the poller, sends more.
	onLoop(func() { _ = el.poller.AddRead(&b.pollAttachment, false) }, func() {})
	if _, err := clients['b'].Write(bytes.Repeat([]byte{'b'}, 10)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's bytes", func() bool { return r.count('b') >= 111 })
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, got := range r.got {
		if want := bytes.Repeat([]byte{name}, len(got)); !bytes.Equal(got, want) {
			t.Errorf("connection %c was handed %q, want only its own bytes", name, got)
		}
	}
}
