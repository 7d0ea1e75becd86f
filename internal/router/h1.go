package router

// A strict, allocation-free HTTP/1.1 message-head parser for the event loop.
// Every slice it returns views the caller's buffer. The rules follow RFC 9110
// and RFC 9112 and refuse what could be read two ways (request smuggling).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
)

// hdr is one header field; name and value view the parsed buffer.
type hdr struct{ name, value []byte }

const maxHeaders = 64 // more header fields than this is errHeaderTooLarge

// Limits of the parser that callers do not choose.
const (
	h1MaxMethod      = 20   // longest request method
	h1MaxTarget      = 8192 // longest request target
	h1MaxEmptyLines  = 4    // empty lines skipped before a request line
	h1MaxChunkDigits = 15   // most hex digits in a chunk size
	h1MaxChunkLine   = 4096 // longest chunk-size or trailer line, without CRLF
)

var (
	errHeaderTooLarge = errors.New("request header too large") // also used for responses
	errMalformed      = errors.New("malformed HTTP message")
	errBodyTooLarge   = errors.New("body too large")
)

// Byte classes of h1Class.
const (
	h1Token   = 1 << iota // tchar (RFC 9110 §5.6.2)
	h1Value               // field-value byte: HTAB, SP, VCHAR, obs-text
	h1Target              // request-target byte: VCHAR (0x21–0x7e)
	h1RegName             // reg-name byte: unreserved, pct-encoded ('%' and hex), sub-delims (RFC 3986)
)

// h1Class maps each byte to its h1Token, h1Value and h1Target classes.
var h1Class = func() (t [256]uint8) {
	for c := range 256 {
		if c == '\t' || c >= ' ' && c != 0x7f {
			t[c] |= h1Value
		}
		if c > ' ' && c < 0x7f {
			t[c] |= h1Target
		}
		if '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' ||
			c < 0x80 && strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0 {
			t[c] |= h1Token
		}
		if '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' ||
			c < 0x80 && strings.IndexByte("-._~%!$&'()*+,;=", byte(c)) >= 0 {
			t[c] |= h1RegName
		}
	}
	return t
}()

// reqHead is a parsed request head.
type reqHead struct {
	method, target []byte // request line; target as sent
	path           []byte // target's path: origin-form up to '?' ; for absolute-form ("http://host/p?q") the "/p" part ("/" if empty); "*" for asterisk-form
	query          []byte // from '?' included to the end of target, or nil
	minor          int    // HTTP/1.<minor>: 0 or 1
	hdrs           []hdr  // all fields in order (caller provides backing array via h.hdrs = arr[:0])
	contentLength  int64  // -1 when absent
	chunked        bool   // Transfer-Encoding: chunked
	close          bool   // connection must close after this exchange: "Connection: close" (any token, case-insensitive, comma lists), or HTTP/1.0 without "Connection: keep-alive"
	keepAlive10    bool   // HTTP/1.0 with Connection: keep-alive (and without close)
	expectContinue bool   // Expect: 100-continue (case-insensitive)
	expectOther    bool   // an Expect field other than 100-continue (the server answers 417)
	host           []byte // Host value (trimmed), nil if absent
	hostSeen       bool   // a Host field was sent (its value may be empty)
}

// parseRequest parses the request line and header fields at the start of buf.
// It returns n, the length of the head including the final CRLFCRLF (or LFLF),
// with n == 0 and err == nil when buf does not yet hold a whole head and is
// shorter than maxBytes. If the head is not complete within maxBytes bytes,
// or has more than maxHeaders fields, it returns errHeaderTooLarge.
// h.hdrs must be set by the caller to a zero-length slice with capacity maxHeaders; parseRequest resets every other field.
//
// The target must be in origin-form ("/p?q"), absolute-form
// ("http://host/p?q") or asterisk-form ("*"); authority-form (CONNECT) is
// errMalformed. Up to h1MaxEmptyLines empty lines before the request line are
// skipped and counted in n.
func parseRequest(buf []byte, h *reqHead, maxBytes int) (n int, err error) {
	*h = reqHead{hdrs: h.hdrs[:0], contentLength: -1}
	lim := h1Limit(buf, maxBytes)
	var line []byte
	i := 0
	for empty := 0; ; empty++ {
		l, next, ok := h1Line(buf, i, lim)
		if !ok {
			if h1BadStart(buf[i:lim]) {
				return 0, errMalformed
			}
			return h1NeedMore(buf, maxBytes)
		}
		if len(l) > 0 {
			line, i = l, next
			break
		}
		if empty == h1MaxEmptyLines {
			return 0, errMalformed
		}
		i = next
	}
	if !h.parseLine(line) {
		return 0, errMalformed
	}
	f := h1Fields{contentLength: -1, request: true}
	if n, err = f.parse(buf, i, lim, &h.hdrs); err != nil {
		return 0, err
	}
	if n == 0 {
		return h1NeedMore(buf, maxBytes)
	}
	if !f.framed(h.minor) {
		return 0, errMalformed
	}
	h.contentLength, h.chunked, h.close = f.contentLength, f.chunked, f.closes(h.minor)
	h.keepAlive10 = h.minor == 0 && f.keepAlive && !f.close
	h.expectContinue, h.expectOther = f.expect, f.expectOther
	h.host, h.hostSeen = f.host, f.hostSeen
	return n, nil
}

// parseLine parses a request line (without its line end) into h.
func (h *reqHead) parseLine(line []byte) bool {
	m := 0
	for m < len(line) && h1Class[line[m]]&h1Token != 0 {
		m++
	}
	if m == 0 || m > h1MaxMethod || m == len(line) || line[m] != ' ' {
		return false
	}
	rest := line[m+1:]
	t := 0
	for t < len(rest) && h1Class[rest[t]]&h1Target != 0 {
		t++
	}
	if t == 0 || t > h1MaxTarget || t == len(rest) || rest[t] != ' ' {
		return false
	}
	minor, ok := h1Version(rest[t+1:])
	if !ok {
		return false
	}
	h.method, h.target, h.minor = line[:m], rest[:t], minor
	h.path, h.query, ok = h1SplitTarget(h.target)
	return ok
}

// h1SplitTarget splits a request target into its path and query ('?' included).
func h1SplitTarget(t []byte) (path, query []byte, ok bool) {
	if len(t) == 1 && t[0] == '*' {
		return t, nil, true
	}
	p := t
	if q := bytes.IndexByte(t, '?'); q >= 0 {
		p, query = t[:q], t[q:]
	}
	if len(t) > 0 && t[0] == '/' {
		return p, query, true
	}
	// absolute-form: scheme "://" authority [path]
	s := 0
	for s < len(p) && (h1Alpha(p[s]) || s > 0 && (p[s] >= '0' && p[s] <= '9' || p[s] == '+' || p[s] == '-' || p[s] == '.')) {
		s++
	}
	if s == 0 || len(p) < s+4 || string(p[s:s+3]) != "://" {
		return nil, nil, false
	}
	auth := p[s+3:]
	slash := bytes.IndexByte(auth, '/')
	switch {
	case slash == 0:
		return nil, nil, false // empty authority
	case slash < 0:
		return p[s+1 : s+2], query, true // "/" of "://"
	}
	return auth[slash:], query, true
}

// validHostField reports whether a Host value is a URI authority without
// userinfo: a registered name, an IPv4 address or a bracketed IP literal,
// with an optional port (RFC 9110 §7.2, RFC 3986 §3.2.2). It accepts the
// same bytes as net/http (httpguts.ValidHostHeader) but also checks the
// shape, so that a value with a path, a space or a second port is refused.
func validHostField(h []byte) bool {
	host := h
	if len(h) > 0 && h[0] == '[' {
		end := bytes.IndexByte(h, ']')
		if end < 0 {
			return false
		}
		for _, c := range h[1:end] {
			if !(h1Hex(c) || c == ':' || c == '.') {
				return false
			}
		}
		host = h[end+1:]
		if len(host) > 0 && host[0] != ':' {
			return false
		}
	} else if k := bytes.IndexByte(h, ':'); k >= 0 {
		host = h[k:]
		for _, c := range h[:k] {
			if h1Class[c]&h1RegName == 0 {
				return false
			}
		}
	} else {
		for _, c := range h {
			if h1Class[c]&h1RegName == 0 {
				return false
			}
		}
		return len(h) <= 255
	}
	// host is now "" or ":port"
	if len(host) == 0 {
		return len(h) <= 255
	}
	for _, c := range host[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(host) <= 6 && len(h) <= 255
}

// h1Hex reports whether c is a hex digit.
func h1Hex(c byte) bool { return h1Unhex(c) >= 0 }

// h1Alpha reports whether c is an ASCII letter.
func h1Alpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// h1Version parses exactly "HTTP/1.0" or "HTTP/1.1" and returns the minor version.
func h1Version(v []byte) (minor int, ok bool) {
	if len(v) != 8 || string(v[:7]) != "HTTP/1." || v[7] != '0' && v[7] != '1' {
		return 0, false
	}
	return int(v[7] - '0'), true
}

// h1BadStart reports whether p, the incomplete start of a request line,
// already cannot become a valid one (a bad or too long method), so that
// non-HTTP clients are refused at once.
func h1BadStart(p []byte) bool {
	if len(p) == 1 && p[0] == '\r' {
		return false // maybe an empty line
	}
	for k, c := range p {
		if c == ' ' {
			return k == 0
		}
		if k == h1MaxMethod || h1Class[c]&h1Token == 0 {
			return true
		}
	}
	return false
}

// respHead is a parsed response head.
type respHead struct {
	status        int
	minor         int
	hdrs          []hdr
	contentLength int64 // -1 when absent
	chunked       bool
	close         bool // "Connection: close", or HTTP/1.0 without keep-alive
}

// parseResponse is parseRequest for a status line ("HTTP/1.1 200 OK"; the reason may be empty or missing).
// Empty lines before the status line are errMalformed.
func parseResponse(buf []byte, h *respHead, maxBytes int) (n int, err error) {
	*h = respHead{hdrs: h.hdrs[:0], contentLength: -1}
	lim := h1Limit(buf, maxBytes)
	line, i, ok := h1Line(buf, 0, lim)
	if !ok {
		return h1NeedMore(buf, maxBytes)
	}
	if !h.parseLine(line) {
		return 0, errMalformed
	}
	f := h1Fields{contentLength: -1}
	if n, err = f.parse(buf, i, lim, &h.hdrs); err != nil {
		return 0, err
	}
	if n == 0 {
		return h1NeedMore(buf, maxBytes)
	}
	if !f.framed(h.minor) {
		return 0, errMalformed
	}
	h.contentLength, h.chunked, h.close = f.contentLength, f.chunked, f.closes(h.minor)
	return n, nil
}

// parseLine parses a status line (without its line end) into h.
func (h *respHead) parseLine(line []byte) bool {
	if len(line) < 12 || line[8] != ' ' || len(line) > 12 && line[12] != ' ' {
		return false
	}
	minor, ok := h1Version(line[:8])
	d0, d1, d2 := line[9], line[10], line[11]
	if !ok || d0 < '1' || d0 > '9' || d1 < '0' || d1 > '9' || d2 < '0' || d2 > '9' {
		return false
	}
	if len(line) > 12 && !h1ValueBytes(line[13:]) {
		return false
	}
	h.minor = minor
	h.status = int(d0-'0')*100 + int(d1-'0')*10 + int(d2-'0')
	return true
}

// h1Limit is how much of buf a head may take: min(len(buf), maxBytes), at least 0.
func h1Limit(buf []byte, maxBytes int) int {
	return max(min(len(buf), maxBytes), 0)
}

// h1NeedMore is the result for a head not complete in buf.
func h1NeedMore(buf []byte, maxBytes int) (int, error) {
	if len(buf) >= maxBytes {
		return 0, errHeaderTooLarge
	}
	return 0, nil
}

// h1Line returns the line at buf[i:] without its LF or CRLF end, and the
// index after that end. ok is false when buf[i:lim] holds no LF.
func h1Line(buf []byte, i, lim int) (line []byte, next int, ok bool) {
	k := bytes.IndexByte(buf[i:lim], '\n')
	if k < 0 {
		return nil, 0, false
	}
	line = buf[i : i+k]
	if k > 0 && line[k-1] == '\r' {
		line = line[:k-1]
	}
	return line, i + k + 1, true
}

// h1Fields is what the header fields of a message say about it.
type h1Fields struct {
	contentLength int64 // -1 when absent
	chunked       bool  // Transfer-Encoding: chunked
	close         bool  // Connection has close
	keepAlive     bool  // Connection has keep-alive
	request       bool  // parsing a request: look at Host and Expect
	expect        bool  // Expect: 100-continue
	expectOther   bool  // Expect: anything else
	hostSeen      bool
	host          []byte
}

// framed applies the framing rule requests and responses share (RFC 9112
// §6.1, the request-smuggling rule): chunked excludes a Content-Length and
// HTTP/1.0.
func (f *h1Fields) framed(minor int) bool {
	return !f.chunked || f.contentLength < 0 && minor != 0
}

// closes says whether the connection ends after this message: it says so,
// or it is HTTP/1.0 without keep-alive.
func (f *h1Fields) closes(minor int) bool {
	return f.close || minor == 0 && !f.keepAlive
}

// parse parses the header fields from buf[i:] through the empty line that
// ends them, appending them to *hdrs. It returns n == 0 and no error when
// buf[:lim] ends before that empty line.
func (f *h1Fields) parse(buf []byte, i, lim int, hdrs *[]hdr) (n int, err error) {
	for {
		line, next, ok := h1Line(buf, i, lim)
		if !ok {
			return 0, nil
		}
		i = next
		if len(line) == 0 {
			return i, nil
		}
		name, value, ok := h1SplitField(line)
		if !ok {
			return 0, errMalformed
		}
		if len(*hdrs) == maxHeaders {
			return 0, errHeaderTooLarge
		}
		*hdrs = append(*hdrs, hdr{name, value})
		if !f.note(name, value) {
			return 0, errMalformed
		}
	}
}

// note records what a header field means for the message; false means malformed.
func (f *h1Fields) note(name, value []byte) bool {
	switch len(name) {
	case 4:
		if f.request && equalFold(name, "host") {
			if f.hostSeen {
				return false
			}
			f.hostSeen, f.host = true, value
		}
	case 6:
		if f.request && equalFold(name, "expect") {
			if equalFold(value, "100-continue") {
				f.expect = true
			} else {
				f.expectOther = true
			}
		}
	case 10:
		if equalFold(name, "connection") {
			f.close = f.close || hasToken(value, "close")
			f.keepAlive = f.keepAlive || hasToken(value, "keep-alive")
		}
	case 14:
		if equalFold(name, "content-length") {
			cl, ok := h1ContentLength(value, f.contentLength)
			f.contentLength = cl
			return ok
		}
	case 17:
		if equalFold(name, "transfer-encoding") {
			if f.chunked || !equalFold(value, "chunked") {
				return false
			}
			f.chunked = true
		}
	}
	return true
}

// h1ContentLength parses a Content-Length value, a comma list of 1–18
// digit numbers that must all equal each other and prev (unless prev is -1).
func h1ContentLength(v []byte, prev int64) (int64, bool) {
	for {
		elem := v
		k := bytes.IndexByte(v, ',')
		if k >= 0 {
			elem, v = v[:k], v[k+1:]
		}
		elem = h1TrimOWS(elem)
		if len(elem) == 0 || len(elem) > 18 {
			return prev, false
		}
		var n int64
		for _, c := range elem {
			if c < '0' || c > '9' {
				return prev, false
			}
			n = n*10 + int64(c-'0')
		}
		if prev >= 0 && n != prev {
			return prev, false
		}
		prev = n
		if k < 0 {
			return prev, true
		}
	}
}

// h1SplitField splits a field line into its name and its value without
// surrounding whitespace; ok is false if the line is not a valid field.
func h1SplitField(line []byte) (name, value []byte, ok bool) {
	k := 0
	for k < len(line) && h1Class[line[k]]&h1Token != 0 {
		k++
	}
	// An obs-fold line starts with SP or HTAB: k == 0 refuses it too.
	if k == 0 || k == len(line) || line[k] != ':' || !h1ValueBytes(line[k+1:]) {
		return nil, nil, false
	}
	return line[:k], h1TrimOWS(line[k+1:]), true
}

// h1ValueBytes reports whether every byte of v may appear in a field value.
func h1ValueBytes(v []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; len(v) >= 8; v = v[8:] {
		// Eight bytes at a time: only a word with a byte below SP (HTAB
		// included) or a DEL needs the byte-by-byte look.
		x := binary.LittleEndian.Uint64(v)
		y := x ^ ones*0x7f
		if ((x-ones*' ')&^x|(y-ones)&^y)&highs == 0 {
			continue
		}
		for _, c := range v[:8] {
			if h1Class[c]&h1Value == 0 {
				return false
			}
		}
	}
	for _, c := range v {
		if h1Class[c]&h1Value == 0 {
			return false
		}
	}
	return true
}

// h1TrimOWS trims spaces and tabs from both ends of v.
func h1TrimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// hasToken reports whether a comma-separated header value contains tok, case-insensitively, ignoring spaces/tabs around elements.
func hasToken(v []byte, tok string) bool {
	for {
		elem := v
		k := bytes.IndexByte(v, ',')
		if k >= 0 {
			elem, v = v[:k], v[k+1:]
		}
		if equalFold(h1TrimOWS(elem), tok) {
			return true
		}
		if k < 0 {
			return false
		}
	}
}

// equalFold reports whether ASCII b equals lower-case s case-insensitively (no allocation).
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if h1Lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

// h1Lower maps ASCII upper-case letters to lower case.
func h1Lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Chunked framing is bounded the way net/http bounds it: every chunk-size
// or trailer line adds its length to an excess, every chunk's data pays
// 16 + 2×size bytes of it back, and an excess over h1MaxChunkExcess is
// errMalformed. The bytes a client sends for a body are then linear in the
// body's size (at most about 21 per data byte, plus h1MaxChunkExcess), not
// unbounded as when only decoded bytes count.
const h1MaxChunkExcess = 16 << 10

// Where a chunkDecoder is in the body.
const (
	chSize  uint8 = iota // at a chunk-size line
	chData               // in a chunk's data
	chCRLF               // at the CRLF after a chunk's data
	chTrail              // in the trailer section
	chDone               // the body ended
)

// chunkDecoder decodes a chunked body incrementally: each decode consumes
// what it can of the bytes it is given (whole lines, and data as far as it
// goes), appends the data to dst and remembers where it stopped, so a body
// that arrives in pieces is parsed once, not again on every read. The zero
// value is ready for a body.
type chunkDecoder struct {
	state  uint8
	left   int64 // chData: data bytes of the chunk still to come
	size   int   // data bytes so far
	excess int64 // framing bytes not paid for by data
	fields int   // trailer fields so far
}

// decode consumes the start of buf, appending chunk data to *dst. It
// returns how many bytes of buf it consumed (an incomplete line is left
// for the next call, with more bytes after it) and whether the body ended.
// The data decoded in all is at most max (more is errBodyTooLarge, as soon
// as a chunk size says so); a line over h1MaxChunkLine bytes, a bare LF in
// the framing, or framing over the excess bound is errMalformed; more than
// maxHeaders trailer fields is errHeaderTooLarge. Chunk extensions are
// checked and skipped, trailer fields checked and discarded. After an
// error the decoder must not be used again.
func (d *chunkDecoder) decode(buf []byte, dst *[]byte, max int) (n int, done bool, err error) {
	max = h1NonNegative(max)
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
				x := h1Unhex(buf[j])
				if x < 0 {
					break
				}
				if j-i == h1MaxChunkDigits {
					return i, false, errMalformed
				}
				chunk = chunk<<4 | int64(x)
				if chunk > int64(max-d.size) {
					return i, false, errBodyTooLarge
				}
			}
			if j == i && j < len(buf) {
				return i, false, errMalformed
			}
			line, next, err := h1ChunkLine(buf, i)
			if next == 0 {
				return i, false, err
			}
			if !h1ChunkExt(line[j-i:]) {
				return i, false, errMalformed
			}
			d.excess += int64(next - i)
			d.excess -= 16 + 2*chunk
			if d.excess < 0 {
				d.excess = 0
			}
			if d.excess > h1MaxChunkExcess {
				return i, false, errMalformed
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
				return i, false, errMalformed
			default:
				return i, false, nil
			}
		case chTrail:
			line, next, err := h1ChunkLine(buf, i)
			if next == 0 {
				return i, false, err
			}
			if d.excess += int64(next - i); d.excess > h1MaxChunkExcess {
				return i, false, errMalformed
			}
			i = next
			if len(line) == 0 {
				d.state = chDone
				continue
			}
			if d.fields == maxHeaders {
				return i, false, errHeaderTooLarge
			}
			d.fields++
			if _, _, ok := h1SplitField(line); !ok {
				return i, false, errMalformed
			}
		}
	}
}

// chunkedBody decodes a whole chunked body at the start of buf into dst
// (appending) and returns the grown dst and the number of bytes of buf it
// takes (through the last-chunk, optional trailer fields, and final CRLF).
// n == 0 && err == nil means buf does not yet hold the whole body. The
// rules are chunkDecoder's. Nothing is appended to dst unless the body is
// whole and valid.
func chunkedBody(buf, dst []byte, max int) (body []byte, n int, err error) {
	var d chunkDecoder
	body = dst
	n, done, err := d.decode(buf, &body, max)
	if err != nil || !done {
		return dst, 0, err
	}
	return body, n, nil
}

// h1NonNegative returns v, or 0 if v is negative.
func h1NonNegative(v int) int { return max(v, 0) }

// h1ChunkLine returns the CRLF-ended line at buf[i:] without its CRLF and the
// index after it. next == 0 means no line: err is errMalformed for a bare LF
// or a line over h1MaxChunkLine bytes, nil when buf ends first.
func h1ChunkLine(buf []byte, i int) (line []byte, next int, err error) {
	w := buf[i:]
	if len(w) > h1MaxChunkLine+2 {
		w = w[:h1MaxChunkLine+2]
	}
	k := bytes.IndexByte(w, '\n')
	switch {
	case k < 0 && len(w) == h1MaxChunkLine+2:
		return nil, 0, errMalformed
	case k < 0:
		return nil, 0, nil
	case k == 0 || w[k-1] != '\r':
		return nil, 0, errMalformed
	}
	return w[:k-1], i + k + 1, nil
}

// h1ChunkExt reports whether the rest of a chunk-size line after the digits is
// empty or a chunk extension: [ BWS ";" field-value bytes ].
func h1ChunkExt(ext []byte) bool {
	if len(ext) == 0 {
		return true
	}
	k := 0
	for k < len(ext) && (ext[k] == ' ' || ext[k] == '\t') {
		k++
	}
	return k < len(ext) && ext[k] == ';' && h1ValueBytes(ext[k+1:])
}

// h1Unhex returns the value of hex digit c, or -1.
func h1Unhex(c byte) int {
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
