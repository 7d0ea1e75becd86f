package h1

import "bytes"

// Chunked framing is bounded the way net/http bounds it: every chunk-size
// or trailer line adds its length to an excess, every chunk's data pays
// 16 + 2×size bytes of it back, and an excess over maxChunkExcess is
// ErrMalformed. The bytes a client sends for a body are then linear in the
// body's size (at most about 21 per data byte, plus maxChunkExcess), not
// unbounded as when only decoded bytes count.
const maxChunkExcess = 16 << 10

// Where a ChunkDecoder is in the body.
const (
	chSize  uint8 = iota // at a chunk-size line
	chData               // in a chunk's data
	chCRLF               // at the CRLF after a chunk's data
	chTrail              // in the trailer section
	chDone               // the body ended
)

// ChunkDecoder decodes a chunked body incrementally: each decode consumes
// what it can of the bytes it is given (whole lines, and data as far as it
// goes), appends the data to dst and remembers where it stopped, so a body
// that arrives in pieces is parsed once, not again on every read. The zero
// value is ready for a body.
type ChunkDecoder struct {
	state  uint8
	left   int64 // chData: data bytes of the chunk still to come
	size   int   // data bytes so far
	excess int64 // framing bytes not paid for by data
	fields int   // trailer fields so far
}

// Decode consumes the start of buf, appending chunk data to *dst. It
// returns how many bytes of buf it consumed (an incomplete line is left
// for the next call, with more bytes after it) and whether the body ended.
// The data decoded in all is at most max (more is ErrBodyTooLarge, as soon
// as a chunk size says so); a line over maxChunkLine bytes, a bare LF in
// the framing, or framing over the excess bound is ErrMalformed; more than
// MaxFields trailer fields is ErrHeaderTooLarge. Chunk extensions are
// checked and skipped, trailer fields checked and discarded. After an
// error the decoder must not be used again.
func (d *ChunkDecoder) Decode(buf []byte, dst *[]byte, max int) (n int, done bool, err error) {
	max = nonNegative(max)
	i := 0
	for {
		switch d.state {
		case chDone:
			return i, true, nil
		case chSize:
			// chunk-size, checked against max digit by digit: more digits only grow it.
			var chunk int64
			j := i
			for ; j < len(buf); j++ {
				x := unhex(buf[j])
				if x < 0 {
					break
				}
				if j-i == maxChunkDigits {
					return i, false, ErrMalformed
				}
				chunk = chunk<<4 | int64(x)
				if chunk > int64(max-d.size) {
					return i, false, ErrBodyTooLarge
				}
			}
			if j == i && j < len(buf) {
				return i, false, ErrMalformed
			}
			line, next, err := chunkLine(buf, i)
			if next == 0 {
				return i, false, err
			}
			if !validChunkExt(line[j-i:]) {
				return i, false, ErrMalformed
			}
			d.excess += int64(next - i)
			d.excess -= 16 + 2*chunk
			if d.excess < 0 {
				d.excess = 0
			}
			if d.excess > maxChunkExcess {
				return i, false, ErrMalformed
			}
			i = next
			if chunk == 0 {
				d.state = chTrail
				continue
			}
			d.state, d.left = chData, chunk
		case chData:
			k := int(min(d.left, int64(len(buf)-i)))
			if k == 0 {
				return i, false, nil
			}
			if dst != nil {
				*dst = append(*dst, buf[i:i+k]...)
			}
			i += k
			d.size += k
			if d.left -= int64(k); d.left == 0 {
				d.state = chCRLF
			}
		case chCRLF:
			switch {
			case len(buf)-i >= 2 && buf[i] == '\r' && buf[i+1] == '\n':
				i += 2
				d.state = chSize
			case len(buf)-i >= 2, len(buf)-i == 1 && buf[i] != '\r':
				return i, false, ErrMalformed
			default:
				return i, false, nil
			}
		case chTrail:
			line, next, err := chunkLine(buf, i)
			if next == 0 {
				return i, false, err
			}
			if d.excess += int64(next - i); d.excess > maxChunkExcess {
				return i, false, ErrMalformed
			}
			i = next
			if len(line) == 0 {
				d.state = chDone
				continue
			}
			if d.fields == MaxFields {
				return i, false, ErrHeaderTooLarge
			}
			d.fields++
			if _, _, ok := splitField(line); !ok {
				return i, false, ErrMalformed
			}
		}
	}
}

// ChunkedBody decodes a whole chunked body at the start of buf into dst
// (appending) and returns the grown dst and the number of bytes of buf it
// takes (through the last-chunk, optional trailer fields, and final CRLF).
// n == 0 && err == nil means buf does not yet hold the whole body. The
// rules are ChunkDecoder's. Nothing is appended to dst unless the body is
// whole and valid.
func ChunkedBody(buf, dst []byte, max int) (body []byte, n int, err error) {
	var d ChunkDecoder
	body = dst
	n, done, err := d.Decode(buf, &body, max)
	if err != nil || !done {
		return dst, 0, err
	}
	return body, n, nil
}

// nonNegative returns v, or 0 if v is negative.
func nonNegative(v int) int { return max(v, 0) }

// chunkLine returns the CRLF-ended line at buf[i:] without its CRLF and the
// index after it. next == 0 means no line: err is ErrMalformed for a bare LF
// or a line over maxChunkLine bytes, nil when buf ends first.
func chunkLine(buf []byte, i int) (line []byte, next int, err error) {
	w := buf[i:]
	if len(w) > maxChunkLine+2 {
		w = w[:maxChunkLine+2]
	}
	k := bytes.IndexByte(w, '\n')
	switch {
	case k < 0 && len(w) == maxChunkLine+2:
		return nil, 0, ErrMalformed
	case k < 0:
		return nil, 0, nil
	case k == 0 || w[k-1] != '\r':
		return nil, 0, ErrMalformed
	}
	return w[:k-1], i + k + 1, nil
}

// validChunkExt reports whether the rest of a chunk-size line after the digits is
// empty or a chunk extension: [ BWS ";" field-value bytes ].
func validChunkExt(ext []byte) bool {
	if len(ext) == 0 {
		return true
	}
	k := 0
	for k < len(ext) && (ext[k] == ' ' || ext[k] == '\t') {
		k++
	}
	return k < len(ext) && ext[k] == ';' && validValue(ext[k+1:])
}

// unhex returns the value of hex digit c, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
