package handoff_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellkit/cellkit/internal/handoff"
)

// BenchmarkLeavingTheListener measures what the decision record compares:
// an old process that leaves while connections wait in the accept queue,
// with a successor beside it. reuseport: two sockets in one SO_REUSEPORT
// group, the old one closed (the kernel resets the connections hashed to
// its queue unless net.ipv4.tcp_migrate_req is set); handoff: one socket,
// passed to the successor as this package does, the old descriptor
// closed. It reports the connections reset per leave, of 64 waiting.
//
//	go test -run '^$' -bench LeavingTheListener -benchtime 20x ./internal/handoff/
func BenchmarkLeavingTheListener(b *testing.B) {
	for _, tc := range []struct {
		name  string
		pair  func(b *testing.B) (old, next net.Listener)
		leave func(old net.Listener)
	}{
		{"reuseport", reusePortPair, func(old net.Listener) { old.Close() }},
		{"handoff", handedPair, func(old net.Listener) { old.Close() }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			reset := 0
			for b.Loop() {
				old, next := tc.pair(b)
				conns := make([]net.Conn, 64)
				for i := range conns {
					c, err := net.DialTimeout("tcp", next.Addr().String(), time.Second)
					if err != nil {
						b.Fatal(err)
					}
					conns[i] = c
				}
				time.Sleep(20 * time.Millisecond) // every handshake done, each connection queued
				tc.leave(old)
				go func() {
					for {
						c, err := next.Accept()
						if err != nil {
							return
						}
						c.Write([]byte{1})
						c.Close()
					}
				}()
				for _, c := range conns {
					c.SetReadDeadline(time.Now().Add(2 * time.Second))
					if _, err := c.Read(make([]byte, 1)); err != nil {
						reset++
					}
					c.Close()
				}
				next.Close()
			}
			b.ReportMetric(float64(reset)/float64(b.N), "reset/leave")
		})
	}
}

func reusePortPair(b *testing.B) (net.Listener, net.Listener) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		return errors.Join(err, serr)
	}}
	old, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	next, err := lc.Listen(context.Background(), "tcp", old.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	return old, next
}

func handedPair(b *testing.B) (net.Listener, net.Listener) {
	old, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	files, err := handoff.Files(old)
	if err != nil {
		b.Fatal(err)
	}
	defer files[0].Close()
	next, err := net.FileListener(files[0])
	if err != nil {
		b.Fatal(err)
	}
	return old, next
}
