package h1

import (
	"bytes"
	"io"
	"net/http/httputil"
	"strings"
	"testing"
)

func TestChunkedBody(t *testing.T) {
	for _, tc := range []struct {
		name, body, tail, want string
		max                    int
	}{
		{"empty", "0\r\n\r\n", "", "", 10},
		{"one chunk", "5\r\nhello\r\n0\r\n\r\n", "", "hello", 10},
		{"chunks", "3\r\nabc\r\n2\r\nde\r\n1\r\nf\r\n0\r\n\r\n", "GET / HTTP/1.1\r\n\r\n", "abcdef", 10},
		{"hex digits", "a\r\n0123456789\r\nB\r\nABCDEFGHIJK\r\n0\r\n\r\n", "", "0123456789ABCDEFGHIJK", 21},
		{"leading zeros", "0005\r\nhello\r\n000\r\n\r\n", "", "hello", 5},
		{"15 digits", "000000000000005\r\nhello\r\n0\r\n\r\n", "", "hello", 5},
		{"CRLF in data", "4\r\n\r\n\r\n\r\n0\r\n\r\n", "", "\r\n\r\n", 4},
		{"extensions", "5;name=value\r\nhello\r\n0;last\r\n\r\n", "", "hello", 5},
		{"extension with BWS and quotes", "5 \t; a = \"x;y\\\" z\"\r\nhello\r\n0 ;b\r\n\r\n", "", "hello", 5},
		{"trailers", "2\r\nhi\r\n0\r\nX-Sum: 1\r\nY:\r\n\r\n", "", "hi", 2},
		{"64 trailers", "0\r\n" + fieldLines(64) + "\r\n", "", "", 0},
		{"max exactly", "3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n", "", "abcdef", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := []byte(tc.body + tc.tail)
			dst := []byte("pre:")
			body, n, err := ChunkedBody(buf, dst, tc.max)
			if err != nil || n != len(tc.body) || string(body) != "pre:"+tc.want {
				t.Fatalf("ChunkedBody = %q, %d, %v; want %q, %d, nil", body, n, err, "pre:"+tc.want, len(tc.body))
			}
			for k := range n {
				body, n, err := ChunkedBody(buf[:k], dst, tc.max)
				if n != 0 || err != nil || string(body) != "pre:" {
					t.Fatalf("prefix %d: ChunkedBody = %q, %d, %v; want %q, 0, nil", k, body, n, err, "pre:")
				}
			}
		})
	}
}

func TestChunkedBodyErrors(t *testing.T) {
	long := strings.Repeat("x", maxChunkLine)
	for _, tc := range []struct {
		name, buf string
		max       int
		err       error
	}{
		{"over max", "5\r\nhello\r\n0\r\n\r\n", 4, ErrBodyTooLarge},
		{"over max before CRLF", "5", 4, ErrBodyTooLarge},
		{"over max before data", "5\r\n", 4, ErrBodyTooLarge},
		{"over max in total", "3\r\nabc\r\n2\r\n", 4, ErrBodyTooLarge},
		{"over max digits so far", "10", 15, ErrBodyTooLarge},
		{"huge", "fffffffffffffff\r\n", 1 << 30, ErrBodyTooLarge},
		{"negative max", "1\r\n", -1, ErrBodyTooLarge},
		{"16 digits", "0000000000000005\r\nhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"16 digits unfinished", "0000000000000000", 10, ErrMalformed},
		{"no size", "\r\nhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"not hex", "x\r\n", 10, ErrMalformed},
		{"sign", "+5\r\nhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"0x", "0x5\r\nhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"leading space", " 5\r\nhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"trailing space", "5 \r\nhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"junk after size", "5x\r\nhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"bare LF after size", "5\nhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"bare CR after size", "5\rhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"CR CR LF after size", "5\r\r\nhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"NUL in extension", "5;a\x00\r\nhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"CR in extension", "5;a\rb\r\nhello\r\n0\r\n\r\n", 10, ErrMalformed},
		{"data too long", "5\r\nhello!\r\n0\r\n\r\n", 10, ErrMalformed},
		{"data too long, unfinished", "5\r\nhello!", 10, ErrMalformed},
		{"no CRLF after data", "5\r\nhello0\r\n\r\n", 10, ErrMalformed},
		{"bare LF after data", "5\r\nhello\n0\r\n\r\n", 10, ErrMalformed},
		{"CR X after data", "5\r\nhello\rX0\r\n\r\n", 10, ErrMalformed},
		{"bare LF at end", "0\r\n\n", 10, ErrMalformed},
		{"bare LF after trailer", "0\r\nX: y\n\r\n", 10, ErrMalformed},
		{"bad trailer", "0\r\nnot a field\r\n\r\n", 10, ErrMalformed},
		{"trailer space before colon", "0\r\nX : y\r\n\r\n", 10, ErrMalformed},
		{"trailer obs-fold", "0\r\nX: y\r\n z\r\n\r\n", 10, ErrMalformed},
		{"trailer control", "0\r\nX: \x00\r\n\r\n", 10, ErrMalformed},
		{"long size line", "1;" + long + "\r\nx\r\n0\r\n\r\n", 10, ErrMalformed},
		{"long size line, unfinished", "1;" + long, 10, ErrMalformed},
		{"long trailer", "0\r\nX: " + long + "\r\n\r\n", 10, ErrMalformed},
		{"65 trailers", "0\r\n" + fieldLines(65) + "\r\n", 10, ErrHeaderTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("pre:")
			body, n, err := ChunkedBody([]byte(tc.buf), dst, tc.max)
			if n != 0 || err != tc.err || string(body) != "pre:" {
				t.Errorf("ChunkedBody(%.40q) = %q, %d, %v; want %q, 0, %v", tc.buf, body, n, err, "pre:", tc.err)
			}
		})
	}
	// The longest size line is accepted.
	ok := "1;" + strings.Repeat("x", maxChunkLine-2) + "\r\nx\r\n0\r\n\r\n"
	if body, n, err := ChunkedBody([]byte(ok), nil, 1); err != nil || n != len(ok) || string(body) != "x" {
		t.Errorf("longest size line: ChunkedBody = %q, %d, %v", body, n, err)
	}
}

func TestChunkedBodyAllocs(t *testing.T) {
	buf := []byte("3\r\nabc\r\n3\r\ndef\r\n3;x\r\nghi\r\n0\r\nX: y\r\n\r\n")
	room := make([]byte, 0, 64)
	if allocs := testing.AllocsPerRun(100, func() {
		if body, _, err := ChunkedBody(buf, room, 64); err != nil || string(body) != "abcdefghi" {
			t.Fatalf("ChunkedBody = %q, %v", body, err)
		}
	}); allocs != 0 {
		t.Errorf("ChunkedBody into a large enough dst allocates %v times; want 0", allocs)
	}
}

// feedChunked decodes body arriving in pieces of step bytes, keeping what
// the decoder leaves unconsumed as a reader would, and returns the data,
// the bytes of body the decoder consumed in all, and the first error.
func feedChunked(body []byte, step, max int) (data []byte, consumed int, done bool, err error) {
	var d ChunkDecoder
	var pending []byte
	for off := 0; off < len(body) && !done; off += step {
		pending = append(pending, body[off:min(off+step, len(body))]...)
		var n int
		n, done, err = d.Decode(pending, &data, max)
		if err != nil {
			return data, consumed, false, err
		}
		consumed += n
		pending = pending[n:]
	}
	return data, consumed, done, nil
}

func TestChunkDecoderIncremental(t *testing.T) {
	body := "3\r\nabc\r\n10;ext=\"q\"\r\n0123456789abcdef\r\n1\r\nz\r\n0\r\nX-Sum: 1\r\n\r\n"
	for step := 1; step <= len(body); step++ {
		data, n, done, err := feedChunked([]byte(body+"GET"), step, 64)
		if err != nil || !done || n != len(body) || string(data) != "abc0123456789abcdefz" {
			t.Fatalf("step %d: data %q, consumed %d, done %v, err %v; want the body's %d bytes", step, data, n, done, err, len(body))
		}
	}
}

// TestChunkFramingIsBounded: a body of tiny chunks with long extensions
// (the framing many times the data) is refused early, whatever the body
// limit, and the bytes read before that are bounded.
func TestChunkFramingIsBounded(t *testing.T) {
	var b strings.Builder
	ext := ";" + strings.Repeat("e", 4000)
	for range 2000 {
		b.WriteString("1" + ext + "\r\nx\r\n")
	}
	b.WriteString("0\r\n\r\n")
	_, n, _, err := feedChunked([]byte(b.String()), 1500, 1<<20)
	if err != ErrMalformed {
		t.Fatalf("1-byte chunks with 4000-byte extensions: err %v; want ErrMalformed", err)
	}
	if n > maxChunkExcess+maxChunkLine+64 {
		t.Errorf("consumed %d bytes before refusing; want at most about %d", n, maxChunkExcess)
	}
	// Long trailers count too.
	var tr strings.Builder
	tr.WriteString("0\r\n")
	for range 60 {
		tr.WriteString("X: " + strings.Repeat("t", 1000) + "\r\n")
	}
	tr.WriteString("\r\n")
	if _, _, err := ChunkedBody([]byte(tr.String()), nil, 10); err != ErrMalformed {
		t.Errorf("60 KB of trailers: err %v; want ErrMalformed", err)
	}
	// Framing paid for by data is fine: many small chunks with short extensions.
	var ok strings.Builder
	for range 5000 {
		ok.WriteString("4;k=v\r\nabcd\r\n")
	}
	ok.WriteString("0\r\n\r\n")
	if data, _, err := ChunkedBody([]byte(ok.String()), nil, 1<<20); err != nil || len(data) != 20000 {
		t.Errorf("5000 chunks of 4 bytes: %d bytes, %v; want 20000, nil", len(data), err)
	}
}

func FuzzChunkedBody(f *testing.F) {
	f.Add([]byte("5\r\nhello\r\n0\r\n\r\n"), uint16(10))
	f.Add([]byte("3;a=b\r\nabc\r\n2\r\nde\r\n0\r\nX: y\r\n\r\nGET"), uint16(10))
	f.Add([]byte("A\r\n0123456789\r\n0\r\n\r\n"), uint16(5))
	f.Add([]byte("5\nhello\n0\n\n"), uint16(10))
	f.Add([]byte("0000000000000005\r\nhello\r\n0\r\n\r\n"), uint16(10))
	f.Fuzz(func(t *testing.T, buf []byte, m uint16) {
		max := fuzzLimit(m)
		dst := []byte("pre:")
		body, n, err := ChunkedBody(buf, dst, max)
		if err != nil || n == 0 {
			if n != 0 || string(body) != "pre:" {
				t.Fatalf("ChunkedBody = %q, %d, %v", body, n, err)
			}
			return
		}
		if n > len(buf) || !bytes.HasPrefix(body, dst) || len(body)-len(dst) > max ||
			!bytes.HasSuffix(buf[:n], []byte("\r\n\r\n")) {
			t.Fatalf("ChunkedBody(%q) = %q, %d", buf, body, n)
		}
		body2, n2, err := ChunkedBody(buf[:n], nil, max)
		if n2 != n || err != nil || string(body2) != string(body[len(dst):]) {
			t.Fatalf("ChunkedBody(buf[:n]) = %q, %d, %v; want %q, %d, nil", body2, n2, err, body[len(dst):], n)
		}
		if _, n2, err := ChunkedBody(buf[:n-1], nil, max); n2 != 0 || err != nil {
			t.Fatalf("ChunkedBody(buf[:n-1]) = %d, %v; want 0, nil", n2, err)
		}
		// When net/http's chunked reader accepts the body too, it decodes the same bytes.
		if got, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(buf[:n]))); err == nil &&
			string(got) != string(body[len(dst):]) {
			t.Fatalf("net/http decodes %q as %q; we as %q", buf[:n], got, body[len(dst):])
		}
		// Fed in pieces, the decoder takes the same bytes to the same data.
		for _, step := range []int{1, 7, 64} {
			data, used, done, err := feedChunked(buf[:n], step, max)
			if err != nil || !done || used != n || string(data) != string(body[len(dst):]) {
				t.Fatalf("in pieces of %d: %q, %d, %v, %v; want %q, %d", step, data, used, done, err, body[len(dst):], n)
			}
		}
	})
}
