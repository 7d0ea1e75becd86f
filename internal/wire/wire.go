// Package wire frames messages on a byte stream, the way the credit agencies
// do: a body preceded by its length in ASCII decimal digits (the NICE
// profile), or fixed-size frames (the KCB profile).
//
// Guarantees: a reader never trusts a header to size a buffer beyond the
// configured maximum — a header with a non-digit or a length over the maximum
// is ErrMalformedFrame, after which the stream is out of step and the caller
// must close the connection. Readers reuse one buffer, so the steady state
// allocates nothing per frame; the returned body is valid until the next
// ReadFrame. Frames split across reads, several in one read, or arriving one
// byte at a time are all read correctly.
package wire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// ErrMalformedFrame means the stream does not hold a valid frame here. The
// connection cannot be resynchronised and must be closed.
var ErrMalformedFrame = errors.New("malformed frame")

// Kind selects a framing.
type Kind int

const (
	// LengthPrefixed frames are an ASCII decimal length header followed by
	// that many body bytes.
	LengthPrefixed Kind = iota
	// Fixed frames all have the same size; there is no header.
	Fixed
)

// DefaultMaxBody bounds length-prefixed bodies when Framing.MaxBody is zero,
// so that a wide header never lets a peer size a huge buffer.
const DefaultMaxBody = 64 << 10

// Framing describes how frames sit on a stream. The zero value is
// length-prefixed with a 4-digit header and a maximum body of 9999 bytes.
type Framing struct {
	Kind Kind
	// HeaderWidth is the number of ASCII digits of a length header. Zero
	// means 4. Ignored for Fixed.
	HeaderWidth int
	// MaxBody is the largest body a reader accepts (and so the largest
	// buffer a peer's header can make it allocate). Zero means
	// DefaultMaxBody or what the header can express, whichever is smaller
	// (9999 for 4 digits). For Fixed it is the frame size and must be set.
	MaxBody int
}

func (f Framing) headerWidth() int {
	if f.HeaderWidth <= 0 {
		return 4
	}
	return f.HeaderWidth
}

func (f Framing) maxBody() int {
	if f.Kind == Fixed {
		return f.MaxBody
	}
	if f.MaxBody > 0 {
		return min(f.MaxBody, f.headerCapacity())
	}
	return min(DefaultMaxBody, f.headerCapacity())
}

// headerCapacity is the largest length the header's digits can express.
func (f Framing) headerCapacity() int {
	n := 1
	for i := 0; i < f.headerWidth() && n < 1<<30; i++ {
		n *= 10
	}
	return n - 1
}

// Validate reports a framing that cannot work.
func (f Framing) Validate() error {
	switch f.Kind {
	case LengthPrefixed:
		if f.headerWidth() > 9 {
			return fmt.Errorf("wire: header width %d over 9 digits", f.headerWidth())
		}
		if f.MaxBody < 0 {
			return fmt.Errorf("wire: max body %d < 0", f.MaxBody)
		}
	case Fixed:
		if f.MaxBody <= 0 {
			return fmt.Errorf("wire: fixed frames need a size > 0, got %d", f.MaxBody)
		}
	default:
		return fmt.Errorf("wire: unknown framing kind %d", f.Kind)
	}
	return nil
}

// Append appends body as one frame to dst. A body the framing cannot carry
// (longer than the header can express or than MaxBody; for Fixed, longer than
// the frame) is an error and dst is returned unchanged. Fixed frames shorter
// than the size are padded with spaces, as fixed-width telegrams are.
func (f Framing) Append(dst, body []byte) ([]byte, error) {
	limit := f.maxBody()
	if len(body) > limit {
		return dst, fmt.Errorf("wire: body of %d bytes over the %d-byte maximum", len(body), limit)
	}
	if f.Kind == Fixed {
		dst = append(dst, body...)
		for i := len(body); i < limit; i++ {
			dst = append(dst, ' ')
		}
		return dst, nil
	}
	w := f.headerWidth()
	start := len(dst)
	for i := 0; i < w; i++ {
		dst = append(dst, '0')
	}
	for i, n := start+w-1, len(body); n > 0; i, n = i-1, n/10 {
		dst[i] = byte('0' + n%10)
	}
	return append(dst, body...), nil
}

// Reader reads frames from a stream.
type Reader struct {
	r      *bufio.Reader
	f      Framing
	header []byte
	buf    []byte
}

// NewReader returns a frame reader over r. It buffers r.
func NewReader(r io.Reader, f Framing) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 4096), f: f, header: make([]byte, f.headerWidth())}
}

// ReadFrame returns the next frame's body, valid until the next call. At a
// clean end of stream between frames it returns io.EOF; a stream that ends
// inside a frame is io.ErrUnexpectedEOF.
func (r *Reader) ReadFrame() ([]byte, error) {
	n := r.f.maxBody()
	if r.f.Kind == LengthPrefixed {
		if _, err := io.ReadFull(r.r, r.header); err != nil {
			return nil, err
		}
		var err error
		if n, err = parseLength(r.header, r.f.maxBody()); err != nil {
			return nil, err
		}
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	body := r.buf[:n]
	if _, err := io.ReadFull(r.r, body); err != nil {
		if errors.Is(err, io.EOF) && r.f.Kind == LengthPrefixed {
			// The header was read, so the stream ended inside a frame. For
			// fixed frames a bare io.EOF here is a clean end between frames.
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}

// parseLength reads an all-digit header and checks it against max.
func parseLength(h []byte, max int) (int, error) {
	n := 0
	for _, c := range h {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: length header %q is not all digits", ErrMalformedFrame, h)
		}
		n = n*10 + int(c-'0')
	}
	if n > max {
		return 0, fmt.Errorf("%w: length %d over the %d-byte maximum", ErrMalformedFrame, n, max)
	}
	return n, nil
}
