package handoff

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// The conversation on the wire: lines of JSON, the sockets (SCM_RIGHTS)
// with the state's first bytes. Every descriptor that comes is either
// handed to the caller or closed here, on every path: one the other side
// sends where none is due, beyond what a state may carry, or with a
// message that is refused.

// conn is one end of a conversation.
type conn struct {
	uc *net.UnixConn
	r  *bufio.Reader
}

func newConn(uc *net.UnixConn) *conn { return &conn{uc: uc, r: bufio.NewReaderSize(uc, 4096)} }

func (c *conn) send(m message, files ...*os.File) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = syscall.UnixRights(fds...)
	}
	n, _, err := c.uc.WriteMsgUnix(b, oob, nil)
	if err == nil && n < len(b) {
		_, err = c.uc.Write(b[n:])
	}
	return err
}

// receive reads one message; files are the sockets that came with it
// (only the state carries any, in its first bytes), at most maxSockets:
// more is an error, and none of them is kept.
func (c *conn) receive() (message, []*os.File, error) {
	var files []*os.File
	if c.r.Buffered() == 0 {
		// Read the first bytes with their control message: the sockets
		// travel with the state's first byte. The control buffer holds
		// maxSockets descriptors; the kernel closes those beyond it and
		// says so (MSG_CTRUNC).
		buf := make([]byte, 4096)
		oob := make([]byte, syscall.CmsgSpace(maxSockets*4))
		n, oobn, flags, _, err := c.uc.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			var perr error
			files, perr = parseRights(oob[:oobn])
			err = errors.Join(err, perr)
		}
		if err == nil && flags&unix.MSG_CTRUNC != 0 {
			err = fmt.Errorf("handoff: more than %d sockets passed", maxSockets)
		}
		if err == nil && n == 0 {
			err = errors.New("handoff: the other side closed")
		}
		if err != nil {
			closeAll(files)
			return message{}, nil, err
		}
		c.r = bufio.NewReaderSize(&prefixed{head: buf[:n], rest: c.uc}, 4096)
	}
	line, err := readLine(c.r)
	if err != nil {
		closeAll(files)
		return message{}, nil, err
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		closeAll(files)
		return message{}, nil, fmt.Errorf("handoff: a message that is not one: %w", err)
	}
	return m, files, nil
}

// prefixed reads head, then rest.
type prefixed struct {
	head []byte
	rest *net.UnixConn
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		return n, nil
	}
	return p.rest.Read(b)
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, more, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, part...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("handoff: a message over %d KiB", maxLine>>10)
		}
		if !more {
			return line, nil
		}
	}
}

// parseRights is the descriptors of the control messages in oob, each
// close-on-exec; an error with them for a control message that is not
// SCM_RIGHTS (the caller closes what came).
func parseRights(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("handoff: control messages: %w", err) // the kernel's own buffer: never seen
	}
	var files []*os.File
	var errs []error
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			errs = append(errs, fmt.Errorf("handoff: a control message of level %d type %d", m.Header.Level, m.Header.Type))
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "handed-over"))
		}
	}
	return files, errors.Join(errs...)
}

func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close() // a descriptor refused or left over: nothing to do if closing fails
	}
}
