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
	f.el = c.(*conn).loop
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
	if f.el.batch == nil {
		t.Skip("no io_uring here: the writes were not batched")
	}
	if w := f.el.batched.Writes.Load(); w < clients {
		t.Errorf("%d batched writes, want the %d of the one callback", w, clients)
	}
}
