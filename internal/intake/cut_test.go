package intake

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// natsCut is a cell's NATS connection that a test cuts at a write of its
// choice, as a network or a stalled server would: the connection stays
// open (the client sees no error, only answers that never come), the
// client's operations after the cut are lost before the server, and the
// server's bytes are held back until the cut heals. The armed write itself
// reaches the server or not, as the test chooses: a write the server makes
// whose answer is lost, or one it never sees; the client cannot tell them
// apart. It is the connection's dialer (nats.SetCustomDialer), so the
// client speaks to the real embedded server through it.
type natsCut struct {
	mu      sync.Mutex
	armed   string // the subject prefix of the write that cuts; "" none
	skip    int    // writes to armed to let through before the one that cuts
	forward bool   // the armed write reaches the server
	cut     bool
	healed  chan struct{} // closed when the cut heals
	cutNow  chan struct{} // closed when the armed write cut the connection
}

func newNATSCut() *natsCut {
	return &natsCut{healed: make(chan struct{}), cutNow: make(chan struct{})}
}

// Dial is the client's dialer.
func (c *natsCut) Dial(network, address string) (net.Conn, error) {
	conn, err := net.DialTimeout(network, address, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: conn, c: c}, nil
}

// arm cuts the connection at the next write to a subject that starts with
// prefix, after sending it to the server if forward; the channel is
// closed when that happens.
func (c *natsCut) arm(prefix string, forward bool) <-chan struct{} {
	return c.armAfter(prefix, 0, forward)
}

// armAfter is arm at the write to prefix after the next skip ones.
func (c *natsCut) armAfter(prefix string, skip int, forward bool) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.skip, c.forward, c.cutNow = prefix, skip, forward, make(chan struct{})
	return c.cutNow
}

// heal lets the client's operations through again and delivers what the
// server sent meanwhile (answers the client no longer waits for).
func (c *natsCut) heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		c.cut = false
		close(c.healed)
		c.healed = make(chan struct{})
	}
}

// pass says whether the client's operation on subject reaches the server,
// and cuts at the armed one (before it is sent: its answer cannot slip
// through).
func (c *natsCut) pass(subject string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.cut:
		return false
	case c.armed != "" && strings.HasPrefix(subject, c.armed) && c.skip > 0:
		c.skip--
	case c.armed != "" && strings.HasPrefix(subject, c.armed):
		c.cut, c.armed = true, ""
		close(c.cutNow)
		return c.forward
	}
	return true
}

// hold waits while the connection is cut.
func (c *natsCut) hold() {
	c.mu.Lock()
	cut, healed := c.cut, c.healed
	c.mu.Unlock()
	if cut {
		<-healed
	}
}

// cutConn is one connection through a natsCut.
type cutConn struct {
	net.Conn
	c       *natsCut
	pending []byte // the client's bytes that are not yet a whole operation
}

// Write sends the client's whole operations that pass, drops the others.
func (cc *cutConn) Write(b []byte) (int, error) {
	cc.pending = append(cc.pending, b...)
	for {
		n, subject, ok := nextOp(cc.pending)
		if !ok {
			break
		}
		if cc.c.pass(subject) {
			if _, err := cc.Conn.Write(cc.pending[:n]); err != nil {
				return 0, err
			}
		}
		cc.pending = cc.pending[n:]
	}
	return len(b), nil
}

// Read holds the server's bytes back while the connection is cut.
func (cc *cutConn) Read(b []byte) (int, error) {
	n, err := cc.Conn.Read(b)
	cc.c.hold()
	return n, err
}

// Close heals the cut: the client's reader must not stay held.
func (cc *cutConn) Close() error {
	cc.c.heal()
	return cc.Conn.Close()
}

// nextOp finds the first whole operation of the NATS client protocol in
// b: its length and, for a publish (PUB, HPUB), its subject.
func nextOp(b []byte) (n int, subject string, ok bool) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		return 0, "", false
	}
	n = i + 2
	f := strings.Fields(string(b[:i]))
	if len(f) < 3 || (!strings.EqualFold(f[0], "PUB") && !strings.EqualFold(f[0], "HPUB")) {
		return n, "", true
	}
	size, err := strconv.Atoi(f[len(f)-1]) // the payload's total size, headers included
	if err != nil {
		panic("malformed publish from the NATS client: " + string(b[:i]))
	}
	if len(b) < n+size+2 {
		return 0, "", false
	}
	return n + size + 2, f[1], true
}

// TestNextOp: the cut parses the client's stream into its operations.
func TestNextOp(t *testing.T) {
	stream := "CONNECT {\"verbose\":false}\r\nPUB a.b _INBOX.1 5\r\nhello\r\nHPUB $KV.x.y _INBOX.2 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n"
	var got []string
	b := []byte(stream)
	for {
		n, subj, ok := nextOp(b)
		if !ok {
			break
		}
		got = append(got, strconv.Itoa(n)+":"+subj)
		b = b[n:]
	}
	want := []string{"27:", "27:a.b", "45:$KV.x.y", "6:"}
	if strings.Join(got, " ") != strings.Join(want, " ") || len(b) != 0 {
		t.Fatalf("operations %v (%d bytes left), want %v", got, len(b), want)
	}
	if _, _, ok := nextOp([]byte("PUB a 5\r\nhel")); ok {
		t.Fatal("a publish without its whole payload was taken for an operation")
	}
}
