package wire_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/cellkit/cellkit/internal/wire"
)

// frame is what a reference parser expects ReadFrame to return.
type frame struct {
	body string
	err  error
}

// expectLength parses a length-prefixed stream the slow, obvious way.
func expectLength(data []byte, f wire.Framing) []frame {
	w, max := f.HeaderWidth, f.Max()
	var out []frame
	for {
		if len(data) == 0 {
			return append(out, frame{err: io.EOF})
		}
		if len(data) < w {
			return append(out, frame{err: io.ErrUnexpectedEOF})
		}
		n := 0
		for _, c := range data[:w] {
			if c < '0' || c > '9' {
				return append(out, frame{err: wire.ErrMalformedFrame})
			}
			n = n*10 + int(c-'0')
		}
		if n > max {
			return append(out, frame{err: wire.ErrMalformedFrame})
		}
		data = data[w:]
		if len(data) < n {
			return append(out, frame{err: io.ErrUnexpectedEOF})
		}
		out = append(out, frame{body: string(data[:n])})
		data = data[n:]
	}
}

// expectFixed cuts a stream into fixed frames.
func expectFixed(data []byte, size int) []frame {
	var out []frame
	for len(data) >= size {
		out = append(out, frame{body: string(data[:size])})
		data = data[size:]
	}
	if len(data) > 0 {
		return append(out, frame{err: io.ErrUnexpectedEOF})
	}
	return append(out, frame{err: io.EOF})
}

// checkStream reads data cut at the split points and compares every frame
// and the final error with want, checking the memory bounds on the way.
func checkStream(t *testing.T, data, splits []byte, f wire.Framing, want []frame) {
	t.Helper()
	r := wire.NewReader(&chunkReader{data: data, sizes: splits}, f)
	for i, w := range want {
		body, err := r.ReadFrame()
		if len(body) > f.Max() {
			t.Fatalf("frame %d: %d bytes, over the %d-byte maximum", i, len(body), f.Max())
		}
		if r.BufCap() > f.Max() {
			t.Fatalf("frame %d: buffer capacity %d over the %d-byte maximum", i, r.BufCap(), f.Max())
		}
		if w.err != nil {
			if !errors.Is(err, w.err) || (w.err == io.EOF && err != io.EOF) {
				t.Fatalf("frame %d: ReadFrame() = %q, %v; want error %v", i, body, err, w.err)
			}
			return
		}
		if err != nil || string(body) != w.body {
			t.Fatalf("frame %d: ReadFrame() = %q, %v; want %q", i, body, err, w.body)
		}
	}
}

// fuzzFraming picks a length-prefixed framing of 1 to 9 digits. A zero
// MaxBody means what the header can express, which for wide headers would
// have every exec allocate up to a gigabyte: cap those at 9999.
func fuzzFraming(width uint8, maxBody uint16) wire.Framing {
	f := wire.Framing{HeaderWidth: int(width)%9 + 1, MaxBody: int(maxBody) % 10000}
	if f.MaxBody == 0 && f.HeaderWidth > 4 {
		f.MaxBody = 9999
	}
	return f
}

func FuzzLengthReader(f *testing.F) {
	f.Add([]byte("0005hello0000"), []byte{}, uint8(4), uint16(0))
	f.Add([]byte("0005hello0003abc"), []byte{0, 1, 2}, uint8(4), uint16(512))
	f.Add([]byte("00a5hello"), []byte{0}, uint8(4), uint16(0))
	f.Add([]byte("9999"), []byte{3}, uint8(4), uint16(100))
	f.Add([]byte("05hello03abc9"), []byte{5, 0}, uint8(2), uint16(0))
	f.Add([]byte("000000005hello"), []byte{1}, uint8(9), uint16(16))
	f.Fuzz(func(t *testing.T, data, splits []byte, width uint8, maxBody uint16) {
		fr := fuzzFraming(width, maxBody)
		checkStream(t, data, splits, fr, expectLength(data, fr))
	})
}

func FuzzFixedReader(f *testing.F) {
	f.Add([]byte("abcdefgh"), []byte{}, uint16(4))
	f.Add([]byte("abcdef"), []byte{0, 2}, uint16(4))
	f.Add(bytes.Repeat([]byte{' '}, 400), []byte{199}, uint16(200))
	f.Add([]byte{}, []byte{}, uint16(1))
	f.Fuzz(func(t *testing.T, data, splits []byte, size uint16) {
		fr := wire.Framing{Kind: wire.Fixed, MaxBody: int(size)%1024 + 1}
		checkStream(t, data, splits, fr, expectFixed(data, fr.MaxBody))
	})
}

// FuzzRoundTrip cuts blob into bodies at cuts, appends them as frames and
// reads them back through arbitrary split points.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("hello, world"), []byte{5, 0, 2}, []byte{}, false, uint8(4), uint16(0))
	f.Add([]byte("hello, world"), []byte{5, 0, 2}, []byte{0}, true, uint8(0), uint16(8))
	f.Add([]byte("0005\x00\xff"), []byte{1}, []byte{3, 1}, false, uint8(4), uint16(3))
	f.Add([]byte("abcdefghijklmnopqrstuvwxyz"), []byte{11, 9}, []byte{0}, false, uint8(1), uint16(500))
	f.Fuzz(func(t *testing.T, blob, cuts, splits []byte, fixed bool, width uint8, size uint16) {
		fr := fuzzFraming(width, size)
		limit := fr.Max()
		if header := (wire.Framing{HeaderWidth: fr.HeaderWidth}).Max(); header < limit {
			limit = header // the header has to hold the length too
		}
		if fixed {
			fr = wire.Framing{Kind: wire.Fixed, MaxBody: int(size)%1024 + 1}
			limit = fr.MaxBody
		}
		var bodies [][]byte
		for i := 0; len(blob) > 0; i++ {
			n := len(blob)
			if len(cuts) > 0 {
				n = min(int(cuts[i%len(cuts)]), n)
				if i >= 4*len(cuts)+len(blob) {
					n = len(blob) // cuts of 0 forever: stop eventually
				}
			}
			if len(bodies) == 255 {
				n = len(blob) // bound the work per input
			}
			bodies = append(bodies, blob[:n])
			blob = blob[n:]
		}
		var stream []byte
		var sent [][]byte
		for _, b := range bodies {
			out, err := fr.Append(stream, b)
			if err != nil {
				if len(b) <= limit {
					t.Fatalf("Append(%d bytes) = %v, within the %d-byte maximum", len(b), err, limit)
				}
				if !bytes.Equal(out, stream) {
					t.Fatal("Append changed dst on error")
				}
				continue
			}
			if len(b) > limit {
				t.Fatalf("Append(%d bytes) succeeded, over the %d-byte maximum", len(b), limit)
			}
			stream = out
			sent = append(sent, b)
		}
		r := wire.NewReader(&chunkReader{data: stream, sizes: splits}, fr)
		for i, want := range sent {
			got, err := r.ReadFrame()
			if err != nil {
				t.Fatalf("frame %d: ReadFrame() = %v", i, err)
			}
			if fixed {
				pad := bytes.Repeat([]byte{' '}, fr.MaxBody-len(want))
				want = append(want[:len(want):len(want)], pad...)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("frame %d: ReadFrame() = %q, want %q", i, got, want)
			}
		}
		if _, err := r.ReadFrame(); err != io.EOF {
			t.Fatalf("after the last frame: ReadFrame() = %v, want io.EOF", err)
		}
	})
}
