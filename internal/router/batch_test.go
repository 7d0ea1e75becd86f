package router

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellkit/cellkit/third_party/uring"
	"github.com/panjf2000/gnet/v2/pkg/netpoll"
)

// uringAvailable says whether this kernel (and its seccomp profile) lets
// a process set up an io_uring, as the loops do.
func uringAvailable(t *testing.T) bool {
	r, err := uring.New(8)
	if err != nil {
		t.Logf("no io_uring: %v", err)
		return false
	}
	r.Close()
	return true
}

// Many clients at once, each asking for answers larger than the kernel
// buffers for it and reading them late: the loops read a round's sockets
// together and write its answers together (io_uring), a write the socket
// does not take whole goes on when it can, and every client gets its own
// answers, whole and in order. On the call-per-socket path (a kernel
// that refuses io_uring) the same holds, and no batch is made.
func TestBatchedReadsAndWritesKeepEveryAnswerWhole(t *testing.T) {
	for _, syscalls := range []bool{false, true} {
		t.Run(fmt.Sprintf("syscalls=%v", syscalls), func(t *testing.T) {
			netpoll.SyscallPerSocketIO.Store(syscalls)
			defer netpoll.SyscallPerSocketIO.Store(false)
			body := func(id string) string { return strings.Repeat(id+";", 256<<10/(len(id)+1)) }
			f := newFakeCell(t, func(_ int, r *http.Request, _ []byte) string {
				b := body(r.URL.Path)
				return "HTTP/1.1 200 OK\r\nCellkit-Call: " + r.Header.Get("Cellkit-Call") + "\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + b
			})
			w := newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": f.url()}})
			d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
				return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8192) })
			}}
			const clients, each = 16, 4
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for i := range clients {
				wg.Go(func() {
					c, err := d.Dial("tcp", strings.TrimPrefix(w.url, "http://"))
					if err != nil {
						errs <- err
						return
					}
					defer c.Close()
					_ = c.SetDeadline(time.Now().Add(20 * time.Second))
					// All requests at once (pipelined), read after a pause:
					// the answers pile up in the router, beyond what the
					// kernel takes for a small window.
					var req strings.Builder
					for j := range each {
						fmt.Fprintf(&req, "GET /v1/inquiries/c1-q%02dr%d HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n\r\n", i, j, w.key)
					}
					if _, err := io.WriteString(c, req.String()); err != nil {
						errs <- err
						return
					}
					time.Sleep(100 * time.Millisecond)
					br := bufio.NewReader(c)
					for j := range each {
						resp, err := http.ReadResponse(br, nil)
						if err != nil {
							errs <- fmt.Errorf("client %d, answer %d: %v", i, j, err)
							return
						}
						got, err := io.ReadAll(resp.Body)
						_ = resp.Body.Close()
						if want := body(fmt.Sprintf("/v1/inquiries/c1-q%02dr%d", i, j)); err != nil || resp.StatusCode != 200 || string(got) != want {
							errs <- fmt.Errorf("client %d, answer %d: %d, %d bytes (%v), want 200 and its own %d bytes", i, j, resp.StatusCode, len(got), err, len(want))
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			n := w.router.eng.loopCounts()
			t.Logf("batches %d, reads %d, writes %d", n.batches, n.batchedReads, n.batchedWrites)
			switch {
			case syscalls && n.batches != 0:
				t.Errorf("%d batches with a system call per read and write", n.batches)
			case !syscalls && !uringAvailable(t):
				t.Log("io_uring refused here: the loops made a call per read and write")
			case !syscalls && (n.batchedReads == 0 || n.batchedWrites == 0):
				t.Errorf("%d batched reads and %d batched writes for %d clients at once, want some of each", n.batchedReads, n.batchedWrites, clients)
			}
		})
	}
}
