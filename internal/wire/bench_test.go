package wire_test

import (
	"bytes"
	"testing"

	"github.com/cellkit/cellkit/internal/wire"
)

// loopReader replays a stream forever.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}

func benchmarkRead(b *testing.B, f wire.Framing, body int) {
	var stream []byte
	for range 64 {
		var err error
		if stream, err = f.Append(stream, bytes.Repeat([]byte("k"), body)); err != nil {
			b.Fatal(err)
		}
	}
	r := wire.NewReader(&loopReader{data: stream}, f)
	b.SetBytes(int64(body))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.ReadFrame(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadLengthFrame(b *testing.B) {
	benchmarkRead(b, wire.Framing{HeaderWidth: 4, MaxBody: 512}, 84)
}

func BenchmarkReadFixedFrame(b *testing.B) {
	benchmarkRead(b, wire.Framing{Kind: wire.Fixed, MaxBody: 200}, 200)
}

func BenchmarkAppendLengthFrame(b *testing.B) {
	f := wire.Framing{HeaderWidth: 4, MaxBody: 512}
	body := bytes.Repeat([]byte("k"), 84)
	dst := make([]byte, 0, 128)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = f.Append(dst[:0], body); err != nil {
			b.Fatal(err)
		}
	}
}
