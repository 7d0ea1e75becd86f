// Package freeport hands out loopback addresses free for a process
// started later, never the same one twice within a while on this machine.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Addr returns a loopback address (127.0.0.1:PORT) that nothing listens
// on now, for a process started later. The port is drawn at random below
// the kernel's ephemeral range (ip_local_port_range): a port the kernel
// hands out for port 0 — to a client's connection or to another server
// asking for any port, such as an embedded NATS — is never one of these,
// so the address stays free until its process binds it unless someone else
// picks the same port explicitly. Nor does another Addr on this
// machine, in this process or another (the test binaries of the packages
// run side by side), for portHold: each port handed out is held by a file
// of its own in the temporary directory's cellkit-ports.
func Addr() (string, error) {
	lo, hi := 10000, ephemeralLow()
	if hi-lo < 1000 {
		lo, hi = 1024, 65535
	}
	var last error
	for range 200 {
		port := lo + rand.IntN(hi-lo)
		if !holdPort(port) {
			last = fmt.Errorf("port %d handed out lately", port)
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			last = err
			continue
		}
		ln.Close()
		return addr, nil
	}
	return "", fmt.Errorf("find a free port: %w", last)
}

// portHold is how long a port Addr handed out is not handed out again.
const portHold = 10 * time.Minute

// holdPort takes port for portHold: false if Addr handed it out less
// than portHold ago. The directory is locked (flock) while a port's file
// is looked at and written, so two processes never both take it.
func holdPort(port int) bool {
	dir := filepath.Join(os.TempDir(), "cellkit-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no place to hold ports: the listen check alone
	}
	d, err := os.Open(dir)
	if err != nil {
		return true
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return true
	}
	defer func() { _ = unix.Flock(int(d.Fd()), unix.LOCK_UN) }() // the close releases it anyway
	path := filepath.Join(dir, strconv.Itoa(port))
	if fi, err := os.Stat(path); err == nil && time.Since(fi.ModTime()) < portHold {
		return false
	}
	if err := os.WriteFile(path, nil, 0o666); err == nil {
		now := time.Now()
		_ = os.Chtimes(path, now, now) // the file was just written: its time is now anyway
	}
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 1024 {
		return 32768
	}
	return n
}
