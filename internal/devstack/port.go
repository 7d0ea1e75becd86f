package devstack

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreeAddr returns a loopback address (127.0.0.1:PORT) that nothing listens
// on now, for a process started later. The port is drawn at random below
// the kernel's ephemeral range (ip_local_port_range): a port the kernel
// hands out for port 0 — to a client's connection or to another server
// asking for any port, such as an embedded NATS — is never one of these,
// so the address stays free until its process binds it unless someone else
// picks the same port explicitly.
func FreeAddr() (string, error) {
	lo, hi := 10000, ephemeralLow()
	if hi-lo < 1000 {
		lo, hi = 1024, 65535
	}
	var last error
	for range 200 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo)))
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
