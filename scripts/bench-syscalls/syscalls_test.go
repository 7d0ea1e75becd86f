package benchsyscalls

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"unsafe"

	"github.com/cellkit/cellkit/third_party/uring"
	"golang.org/x/sys/unix"
)

// BenchmarkGetppid is the cost of entering and leaving the kernel.
func BenchmarkGetppid(b *testing.B) {
	for b.Loop() {
		syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
	}
}

// pairs opens k connected loopback TCP pairs, non-blocking.
func pairs(b *testing.B, k int) (clients, servers []int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	fd := func(c net.Conn) int {
		f, err := c.(*net.TCPConn).File()
		if err != nil {
			b.Fatal(err)
		}
		_ = c.Close()
		n, err := unix.Dup(int(f.Fd()))
		if err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
		_ = unix.SetNonblock(n, true)
		b.Cleanup(func() { _ = unix.Close(n) })
		return n
	}
	for range k {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		clients, servers = append(clients, fd(c)), append(servers, fd(s))
	}
	return clients, servers
}

func call(trap uintptr, fd int, p []byte) int {
	r, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1
	}
	return int(r)
}

// BenchmarkSocketCalls: k 300-byte writes to loopback sockets and the k
// reads of them, as a system call each; ns/op is per call.
func BenchmarkSocketCalls(b *testing.B) {
	for _, k := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			cl, sv := pairs(b, k)
			out, in := make([]byte, 300), make([]byte, 4096)
			b.ResetTimer()
			for range b.N {
				for i := range k {
					if call(unix.SYS_WRITE, cl[i], out) != 300 {
						b.Fatal("write")
					}
				}
				for i := range k {
					if call(unix.SYS_READ, sv[i], in) != 300 {
						b.Fatal("read")
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(2*k), "ns/call")
		})
	}
}

// BenchmarkSocketBatches: the same k writes and k reads as io_uring
// sends and receives, all in one io_uring_enter; ns/call is per
// operation.
func BenchmarkSocketBatches(b *testing.B) {
	for _, k := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			cl, sv := pairs(b, k)
			r, err := uring.New(64)
			if err != nil {
				b.Skipf("no io_uring: %v", err)
			}
			defer r.Close()
			out := [][]byte{make([]byte, 300)}
			iov := make([]unix.Iovec, 1)
			in := make([][]byte, k)
			for i := range in {
				in[i] = make([]byte, 4096)
			}
			bad := 0
			done := func(tag uint64, res int32) {
				if res != 300 {
					bad++
				}
			}
			b.ResetTimer()
			for range b.N {
				for i := range k {
					_ = r.Send(cl[i], out, iov, uint64(i))
				}
				for i := range k {
					_ = r.Recv(sv[i], in[i], uint64(k+i))
				}
				if err := r.Submit(done); err != nil || bad > 0 {
					b.Fatal(err, bad)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(2*k), "ns/call")
		})
	}
}
