package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/cellkit/cellkit/internal/wire"
)

// splitReader returns its data in chunks that end at the given offsets, then
// the rest in one read: frames and headers arrive cut wherever a test says.
type splitReader struct {
	data   []byte
	off    int
	splits []int // ascending offsets into data
}

func (s *splitReader) Read(p []byte) (int, error) {
	if s.off >= len(s.data) {
		return 0, io.EOF
	}
	end := len(s.data)
	for len(s.splits) > 0 && s.splits[0] <= s.off {
		s.splits = s.splits[1:]
	}
	if len(s.splits) > 0 && s.splits[0] < end {
		end = s.splits[0]
	}
	n := copy(p, s.data[s.off:end])
	s.off += n
	return n, nil
}

// chunkReader returns its data in chunks whose sizes come from sizes, cycled:
// the fuzz targets' arbitrary split points.
type chunkReader struct {
	data  []byte
	sizes []byte
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = int(c.sizes[c.i%len(c.sizes)]) + 1
		c.i++
	}
	n = min(n, len(c.data), len(p))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// readers are the ways a stream can arrive; each case runs under all of them.
var readers = []struct {
	name string
	wrap func([]byte) io.Reader
}{
	{"whole", func(b []byte) io.Reader { return bytes.NewReader(b) }},
	{"one byte at a time", func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) }},
	{"half reads", func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) }},
	{"data with EOF", func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) }},
	{"split in a header", func(b []byte) io.Reader { return &splitReader{data: b, splits: []int{2}} }},
	{"split after a header", func(b []byte) io.Reader { return &splitReader{data: b, splits: []int{4}} }},
	{"split in a body", func(b []byte) io.Reader { return &splitReader{data: b, splits: []int{6, 7}} }},
	{"split everywhere", func(b []byte) io.Reader { return &splitReader{data: b, splits: []int{1, 3, 5, 9, 10, 12, 13}} }},
}

// readAll reads frames until an error and returns copies of the bodies.
func readAll(t *testing.T, r *wire.Reader, f wire.Framing) ([]string, error) {
	t.Helper()
	var bodies []string
	for {
		body, err := r.ReadFrame()
		if err != nil {
			if body != nil {
				t.Errorf("ReadFrame returned %d bytes with error %v", len(body), err)
			}
			return bodies, err
		}
		if len(body) > f.Max() {
			t.Fatalf("ReadFrame returned %d bytes, over the %d-byte maximum", len(body), f.Max())
		}
		if r.BufCap() > f.Max() {
			t.Fatalf("buffer capacity %d over the %d-byte maximum", r.BufCap(), f.Max())
		}
		bodies = append(bodies, string(body))
	}
}

func TestReadFrame(t *testing.T) {
	nice := wire.Framing{}
	small := wire.Framing{MaxBody: 8}
	fixed4 := wire.Framing{Kind: wire.Fixed, MaxBody: 4}
	big := strings.Repeat("x", 9999)
	tests := []struct {
		name    string
		framing wire.Framing
		stream  string
		want    []string
		wantErr error
	}{
		{"empty stream", nice, "", nil, io.EOF},
		{"one frame", nice, "0005hello", []string{"hello"}, io.EOF},
		{"several frames", nice, "0005hello0000" + "0003abc", []string{"hello", "", "abc"}, io.EOF},
		{"empty body", nice, "0000", []string{""}, io.EOF},
		{"largest body", nice, "9999" + big + "0001z", []string{big, "z"}, io.EOF},
		{"length at MaxBody", small, "000812345678", []string{"12345678"}, io.EOF},
		{"length over MaxBody", small, "0009123456789", nil, wire.ErrMalformedFrame},
		{"length over MaxBody after a frame", small, "0001a9999", []string{"a"}, wire.ErrMalformedFrame},
		{"letter in header", nice, "00a5hello", nil, wire.ErrMalformedFrame},
		{"sign in header", nice, "-005hello", nil, wire.ErrMalformedFrame},
		{"space in header", nice, " 005hello", nil, wire.ErrMalformedFrame},
		{"space-padded header", nice, "5   hello", nil, wire.ErrMalformedFrame},
		{"bad header after a frame", nice, "0001x00x1y", []string{"x"}, wire.ErrMalformedFrame},
		{"EOF in a header", nice, "00", nil, io.ErrUnexpectedEOF},
		{"EOF in a header after a frame", nice, "0001x000", []string{"x"}, io.ErrUnexpectedEOF},
		{"EOF after a header", nice, "0005", nil, io.ErrUnexpectedEOF},
		{"EOF in a body", nice, "0005hel", nil, io.ErrUnexpectedEOF},
		{"two-digit header", wire.Framing{HeaderWidth: 2}, "05hello03abc", []string{"hello", "abc"}, io.EOF},
		{"two-digit header over MaxBody", wire.Framing{HeaderWidth: 2, MaxBody: 4}, "05hello", nil, wire.ErrMalformedFrame},
		{"nine-digit header", wire.Framing{HeaderWidth: 9, MaxBody: 16}, "000000005hello", []string{"hello"}, io.EOF},
		{"nine-digit header over MaxBody", wire.Framing{HeaderWidth: 9, MaxBody: 16}, "999999999hello", nil, wire.ErrMalformedFrame},
		{"fixed frames", fixed4, "abcdefgh", []string{"abcd", "efgh"}, io.EOF},
		{"fixed empty stream", fixed4, "", nil, io.EOF},
		{"fixed frames of digits", fixed4, "0005hell", []string{"0005", "hell"}, io.EOF},
		{"fixed EOF in a frame", fixed4, "abcdef", []string{"abcd"}, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		for _, rd := range readers {
			t.Run(tt.name+"/"+rd.name, func(t *testing.T) {
				r := wire.NewReader(rd.wrap([]byte(tt.stream)), tt.framing)
				got, err := readAll(t, r, tt.framing)
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("final ReadFrame error = %v, want %v", err, tt.wantErr)
				}
				if tt.wantErr == io.EOF && err != io.EOF {
					t.Errorf("final ReadFrame error = %#v, want io.EOF itself", err)
				}
				if fmt.Sprint(got) != fmt.Sprint(tt.want) || len(got) != len(tt.want) {
					t.Errorf("bodies = %q, want %q", got, tt.want)
				}
			})
		}
	}
}

// An error from the underlying reader reaches the caller as it is.
func TestReadFrameReaderError(t *testing.T) {
	boom := errors.New("boom")
	for _, f := range []wire.Framing{{}, {Kind: wire.Fixed, MaxBody: 4}} {
		r := wire.NewReader(io.MultiReader(strings.NewReader("00"), iotest.ErrReader(boom)), f)
		if _, err := r.ReadFrame(); !errors.Is(err, boom) {
			t.Errorf("kind %d: ReadFrame() = %v, want %v", f.Kind, err, boom)
		}
	}
}

func TestMalformedMessage(t *testing.T) {
	r := wire.NewReader(strings.NewReader("00a5hello"), wire.Framing{})
	_, err := r.ReadFrame()
	if !errors.Is(err, wire.ErrMalformedFrame) || !strings.Contains(err.Error(), `"00a5"`) {
		t.Errorf("ReadFrame() = %v, want ErrMalformedFrame quoting the header", err)
	}
}

func TestAppend(t *testing.T) {
	tests := []struct {
		name    string
		framing wire.Framing
		body    string
		want    string // after the "prefix" already in dst
		wantErr bool
	}{
		{"length", wire.Framing{}, "hello", "0005hello", false},
		{"empty body", wire.Framing{}, "", "0000", false},
		{"largest body", wire.Framing{}, strings.Repeat("x", 9999), "9999" + strings.Repeat("x", 9999), false},
		{"over the header", wire.Framing{}, strings.Repeat("x", 10000), "", true},
		{"at MaxBody", wire.Framing{MaxBody: 8}, "12345678", "000812345678", false},
		{"over MaxBody", wire.Framing{MaxBody: 8}, "123456789", "", true},
		{"two-digit header", wire.Framing{HeaderWidth: 2}, strings.Repeat("y", 99), "99" + strings.Repeat("y", 99), false},
		{"over a two-digit header", wire.Framing{HeaderWidth: 2}, strings.Repeat("y", 100), "", true},
		// MaxBody above what the header can express: the header still limits.
		{"MaxBody over the header", wire.Framing{HeaderWidth: 2, MaxBody: 500}, strings.Repeat("y", 150), "", true},
		{"MaxBody over the header, body fits", wire.Framing{HeaderWidth: 2, MaxBody: 500}, "abc", "03abc", false},
		{"nine-digit header", wire.Framing{HeaderWidth: 9}, "abc", "000000003abc", false},
		{"fixed padded", wire.Framing{Kind: wire.Fixed, MaxBody: 8}, "abc", "abc     ", false},
		{"fixed exact", wire.Framing{Kind: wire.Fixed, MaxBody: 8}, "abcdefgh", "abcdefgh", false},
		{"fixed empty", wire.Framing{Kind: wire.Fixed, MaxBody: 3}, "", "   ", false},
		{"fixed over the size", wire.Framing{Kind: wire.Fixed, MaxBody: 8}, "abcdefghi", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, prefix := range []string{"", "prev"} {
				dst := []byte(prefix)
				got, err := tt.framing.Append(dst, []byte(tt.body))
				if tt.wantErr {
					if err == nil {
						t.Fatalf("Append(%q, %d bytes) = %q, want an error", prefix, len(tt.body), got)
					}
					if string(got) != prefix {
						t.Errorf("Append(%q, %d bytes) changed dst to %q on error", prefix, len(tt.body), got)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Append(%q, %d bytes) = %v", prefix, len(tt.body), err)
				}
				if string(got) != prefix+tt.want {
					t.Errorf("Append(%q, %q) = %q, want %q", prefix, tt.body, got, prefix+tt.want)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		framing wire.Framing
		wantErr string
	}{
		{"zero value", wire.Framing{}, ""},
		{"NICE", wire.Framing{HeaderWidth: 4, MaxBody: 512}, ""},
		{"negative header width means 4", wire.Framing{HeaderWidth: -3}, ""},
		{"nine digits", wire.Framing{HeaderWidth: 9}, ""},
		{"ten digits", wire.Framing{HeaderWidth: 10}, "header width 10 over 9 digits"},
		{"negative MaxBody", wire.Framing{MaxBody: -1}, "max body -1 < 0"},
		{"KCB", wire.Framing{Kind: wire.Fixed, MaxBody: 200}, ""},
		{"fixed without a size", wire.Framing{Kind: wire.Fixed}, "fixed frames need a size > 0, got 0"},
		{"fixed negative size", wire.Framing{Kind: wire.Fixed, MaxBody: -5}, "fixed frames need a size > 0, got -5"},
		{"unknown kind", wire.Framing{Kind: 7}, "unknown framing kind 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.framing.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Validate(%+v) = %v, want nil", tt.framing, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate(%+v) = %v, want an error containing %q", tt.framing, err, tt.wantErr)
			}
		})
	}
}

// frameStream appends n frames of f with bodies of varied sizes up to size,
// the first one the largest so the reader's buffer is sized once.
func frameStream(t testing.TB, f wire.Framing, n, size int) []byte {
	t.Helper()
	var stream []byte
	body := bytes.Repeat([]byte("k"), size)
	for i := range n {
		l := size
		if i > 0 {
			l = (i * 37) % (size + 1)
		}
		var err error
		if stream, err = f.Append(stream, body[:l]); err != nil {
			t.Fatal(err)
		}
	}
	return stream
}

func TestReadFrameAllocs(t *testing.T) {
	for _, f := range []wire.Framing{{HeaderWidth: 4, MaxBody: 512}, {Kind: wire.Fixed, MaxBody: 200}} {
		const runs = 1000
		r := wire.NewReader(bytes.NewReader(frameStream(t, f, runs+10, 200)), f)
		allocs := testing.AllocsPerRun(runs, func() {
			if _, err := r.ReadFrame(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("kind %d: ReadFrame allocates %v times per frame, want 0", f.Kind, allocs)
		}
	}
}

func TestWideHeaderIsCappedByDefault(t *testing.T) {
	f := wire.Framing{HeaderWidth: 9} // could express 999,999,999
	r := wire.NewReader(strings.NewReader("000100000"), f)
	if _, err := r.ReadFrame(); !errors.Is(err, wire.ErrMalformedFrame) {
		t.Fatalf("ReadFrame of a 100000-byte header = %v, want wire.ErrMalformedFrame (default cap %d)", err, wire.DefaultMaxBody)
	}
	if got := r.BufCap(); got > wire.DefaultMaxBody {
		t.Fatalf("buffer grew to %d", got)
	}
}
