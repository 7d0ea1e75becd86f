// Package h1 is a strict, allocation-free HTTP/1.1 parser for event loops:
// request and response heads (ParseRequest, ParseResponse) and chunked
// bodies decoded as they arrive (ChunkDecoder). Every slice it returns
// views the caller's buffer. The rules follow RFC 9110 and RFC 9112 and
// refuse what could be read two ways (request smuggling); every byte a
// message may take is bounded, chunked framing included. It is fuzzed
// against net/http's own readers.
package h1

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
)

// Field is one header field; name and value view the parsed buffer.
type Field struct{ Name, Value []byte }

// MaxFields bounds the header (and trailer) fields of a message: more is
// ErrHeaderTooLarge.
const MaxFields = 64

// Limits of the parser that callers do not choose.
const (
	maxMethod      = 20   // longest request method
	maxTarget      = 8192 // longest request target
	maxEmptyLines  = 4    // empty lines skipped before a request line
	maxChunkDigits = 15   // most hex digits in a chunk size
	maxChunkLine   = 4096 // longest chunk-size or trailer line, without CRLF
)

var (
	ErrHeaderTooLarge = errors.New("request header too large") // also used for responses
	ErrMalformed      = errors.New("malformed HTTP message")
	ErrBodyTooLarge   = errors.New("body too large")
)

// Byte classes of classes.
const (
	classToken   = 1 << iota // tchar (RFC 9110 §5.6.2)
	classValue               // field-value byte: HTAB, SP, VCHAR, obs-text
	classTarget              // request-target byte: VCHAR (0x21–0x7e)
	classRegName             // reg-name byte: unreserved, pct-encoded ('%' and hex), sub-delims (RFC 3986)
)

// classes maps each byte to its classToken, classValue and classTarget classes.
var classes = func() (t [256]uint8) {
	for c := range 256 {
		if c == '\t' || c >= ' ' && c != 0x7f {
			t[c] |= classValue
		}
		if c > ' ' && c < 0x7f {
			t[c] |= classTarget
		}
		if '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' ||
			c < 0x80 && strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0 {
			t[c] |= classToken
		}
		if '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' ||
			c < 0x80 && strings.IndexByte("-._~%!$&'()*+,;=", byte(c)) >= 0 {
			t[c] |= classRegName
		}
	}
	return t
}()

// Request is a parsed request head.
type Request struct {
	Method, Target []byte  // request line; target as sent
	Path           []byte  // target's path: origin-form up to '?' ; for absolute-form ("http://host/p?q") the "/p" part ("/" if empty); "*" for asterisk-form
	Query          []byte  // from '?' included to the end of target, or nil
	Minor          int     // HTTP/1.<minor>: 0 or 1
	Fields         []Field // all fields in order (caller provides backing array via h.Fields = arr[:0])
	ContentLength  int64   // -1 when absent
	Chunked        bool    // Transfer-Encoding: chunked
	Close          bool    // connection must close after this exchange: "Connection: close" (any token, case-insensitive, comma lists), or HTTP/1.0 without "Connection: keep-alive"
	KeepAlive10    bool    // HTTP/1.0 with Connection: keep-alive (and without close)
	ExpectContinue bool    // Expect: 100-continue (case-insensitive)
	ExpectOther    bool    // an Expect field other than 100-continue (the server answers 417)
	Host           []byte  // Host value (trimmed), nil if absent
	HostSeen       bool    // a Host field was sent (its value may be empty)
}

// ParseRequest parses the request line and header fields at the start of buf.
// It returns n, the length of the head including the final CRLFCRLF (or LFLF),
// with n == 0 and err == nil when buf does not yet hold a whole head and is
// shorter than maxBytes. If the head is not complete within maxBytes bytes,
// or has more than MaxFields fields, it returns ErrHeaderTooLarge.
// h.Fields must be set by the caller to a zero-length slice with capacity MaxFields; ParseRequest resets every other field.
//
// The target must be in origin-form ("/p?q"), absolute-form
// ("http://host/p?q") or asterisk-form ("*"); authority-form (CONNECT) is
// ErrMalformed. Up to maxEmptyLines empty lines before the request line are
// skipped and counted in n.
func ParseRequest(buf []byte, h *Request, maxBytes int) (n int, err error) {
	*h = Request{Fields: h.Fields[:0], ContentLength: -1}
	lim := headLimit(buf, maxBytes)
	var line []byte
	i := 0
	for empty := 0; ; empty++ {
		l, next, ok := nextLine(buf, i, lim)
		if !ok {
			if badStart(buf[i:lim]) {
				return 0, ErrMalformed
			}
			return needMore(buf, maxBytes)
		}
		if len(l) > 0 {
			line, i = l, next
			break
		}
		if empty == maxEmptyLines {
			return 0, ErrMalformed
		}
		i = next
	}
	if !h.parseLine(line) {
		return 0, ErrMalformed
	}
	f := fieldInfo{contentLength: -1, request: true}
	if n, err = f.parse(buf, i, lim, &h.Fields); err != nil {
		return 0, err
	}
	if n == 0 {
		return needMore(buf, maxBytes)
	}
	if !f.framed(h.Minor) {
		return 0, ErrMalformed
	}
	h.ContentLength, h.Chunked, h.Close = f.contentLength, f.chunked, f.closes(h.Minor)
	h.KeepAlive10 = h.Minor == 0 && f.keepAlive && !f.close
	h.ExpectContinue, h.ExpectOther = f.expect, f.expectOther
	h.Host, h.HostSeen = f.host, f.hostSeen
	return n, nil
}

// parseLine parses a request line (without its line end) into h.
func (h *Request) parseLine(line []byte) bool {
	m := 0
	for m < len(line) && classes[line[m]]&classToken != 0 {
		m++
	}
	if m == 0 || m > maxMethod || m == len(line) || line[m] != ' ' {
		return false
	}
	rest := line[m+1:]
	t := 0
	for t < len(rest) && classes[rest[t]]&classTarget != 0 {
		t++
	}
	if t == 0 || t > maxTarget || t == len(rest) || rest[t] != ' ' {
		return false
	}
	minor, ok := parseVersion(rest[t+1:])
	if !ok {
		return false
	}
	h.Method, h.Target, h.Minor = line[:m], rest[:t], minor
	h.Path, h.Query, ok = splitTarget(h.Target)
	return ok
}

// splitTarget splits a request target into its path and query ('?' included).
func splitTarget(t []byte) (path, query []byte, ok bool) {
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
	for s < len(p) && (isAlpha(p[s]) || s > 0 && (p[s] >= '0' && p[s] <= '9' || p[s] == '+' || p[s] == '-' || p[s] == '.')) {
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

// ValidHost reports whether a Host value is a URI authority without
// userinfo: a registered name, an IPv4 address or a bracketed IP literal,
// with an optional port (RFC 9110 §7.2, RFC 3986 §3.2.2). It accepts the
// same bytes as net/http (httpguts.ValidHostHeader) but also checks the
// shape, so that a value with a path, a space or a second port is refused.
func ValidHost(h []byte) bool {
	host := h
	if len(h) > 0 && h[0] == '[' {
		end := bytes.IndexByte(h, ']')
		if end < 0 {
			return false
		}
		for _, c := range h[1:end] {
			if !(isHex(c) || c == ':' || c == '.') {
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
			if classes[c]&classRegName == 0 {
				return false
			}
		}
	} else {
		for _, c := range h {
			if classes[c]&classRegName == 0 {
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

// isHex reports whether c is a hex digit.
func isHex(c byte) bool { return unhex(c) >= 0 }

// isAlpha reports whether c is an ASCII letter.
func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// parseVersion parses exactly "HTTP/1.0" or "HTTP/1.1" and returns the minor version.
func parseVersion(v []byte) (minor int, ok bool) {
	if len(v) != 8 || string(v[:7]) != "HTTP/1." || v[7] != '0' && v[7] != '1' {
		return 0, false
	}
	return int(v[7] - '0'), true
}

// badStart reports whether p, the incomplete start of a request line,
// already cannot become a valid one (a bad or too long method), so that
// non-HTTP clients are refused at once.
func badStart(p []byte) bool {
	if len(p) == 1 && p[0] == '\r' {
		return false // maybe an empty line
	}
	for k, c := range p {
		if c == ' ' {
			return k == 0
		}
		if k == maxMethod || classes[c]&classToken == 0 {
			return true
		}
	}
	return false
}

// Response is a parsed response head.
type Response struct {
	Status        int
	Minor         int
	Fields        []Field
	ContentLength int64 // -1 when absent
	Chunked       bool
	Close         bool // "Connection: close", or HTTP/1.0 without keep-alive
}

// ParseResponse is ParseRequest for a status line ("HTTP/1.1 200 OK"; the reason may be empty or missing).
// Empty lines before the status line are ErrMalformed.
func ParseResponse(buf []byte, h *Response, maxBytes int) (n int, err error) {
	*h = Response{Fields: h.Fields[:0], ContentLength: -1}
	lim := headLimit(buf, maxBytes)
	line, i, ok := nextLine(buf, 0, lim)
	if !ok {
		return needMore(buf, maxBytes)
	}
	if !h.parseLine(line) {
		return 0, ErrMalformed
	}
	f := fieldInfo{contentLength: -1}
	if n, err = f.parse(buf, i, lim, &h.Fields); err != nil {
		return 0, err
	}
	if n == 0 {
		return needMore(buf, maxBytes)
	}
	if !f.framed(h.Minor) {
		return 0, ErrMalformed
	}
	h.ContentLength, h.Chunked, h.Close = f.contentLength, f.chunked, f.closes(h.Minor)
	return n, nil
}

// parseLine parses a status line (without its line end) into h.
func (h *Response) parseLine(line []byte) bool {
	if len(line) < 12 || line[8] != ' ' || len(line) > 12 && line[12] != ' ' {
		return false
	}
	minor, ok := parseVersion(line[:8])
	d0, d1, d2 := line[9], line[10], line[11]
	if !ok || d0 < '1' || d0 > '9' || d1 < '0' || d1 > '9' || d2 < '0' || d2 > '9' {
		return false
	}
	if len(line) > 12 && !validValue(line[13:]) {
		return false
	}
	h.Minor = minor
	h.Status = int(d0-'0')*100 + int(d1-'0')*10 + int(d2-'0')
	return true
}

// headLimit is how much of buf a head may take: min(len(buf), maxBytes), at least 0.
func headLimit(buf []byte, maxBytes int) int {
	return max(min(len(buf), maxBytes), 0)
}

// needMore is the result for a head not complete in buf.
func needMore(buf []byte, maxBytes int) (int, error) {
	if len(buf) >= maxBytes {
		return 0, ErrHeaderTooLarge
	}
	return 0, nil
}

// nextLine returns the line at buf[i:] without its LF or CRLF end, and the
// index after that end. ok is false when buf[i:lim] holds no LF.
func nextLine(buf []byte, i, lim int) (line []byte, next int, ok bool) {
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

// fieldInfo is what the header fields of a message say about it.
type fieldInfo struct {
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
func (f *fieldInfo) framed(minor int) bool {
	return !f.chunked || f.contentLength < 0 && minor != 0
}

// closes says whether the connection ends after this message: it says so,
// or it is HTTP/1.0 without keep-alive.
func (f *fieldInfo) closes(minor int) bool {
	return f.close || minor == 0 && !f.keepAlive
}

// parse parses the header fields from buf[i:] through the empty line that
// ends them, appending them to *hdrs. It returns n == 0 and no error when
// buf[:lim] ends before that empty line.
func (f *fieldInfo) parse(buf []byte, i, lim int, hdrs *[]Field) (n int, err error) {
	for {
		line, next, ok := nextLine(buf, i, lim)
		if !ok {
			return 0, nil
		}
		i = next
		if len(line) == 0 {
			return i, nil
		}
		name, value, ok := splitField(line)
		if !ok {
			return 0, ErrMalformed
		}
		if len(*hdrs) == MaxFields {
			return 0, ErrHeaderTooLarge
		}
		*hdrs = append(*hdrs, Field{name, value})
		if !f.note(name, value) {
			return 0, ErrMalformed
		}
	}
}

// note records what a header field means for the message; false means malformed.
func (f *fieldInfo) note(name, value []byte) bool {
	switch len(name) {
	case 4:
		if f.request && EqualFold(name, "host") {
			if f.hostSeen {
				return false
			}
			f.hostSeen, f.host = true, value
		}
	case 6:
		if f.request && EqualFold(name, "expect") {
			if EqualFold(value, "100-continue") {
				f.expect = true
			} else {
				f.expectOther = true
			}
		}
	case 10:
		if EqualFold(name, "connection") {
			f.close = f.close || HasToken(value, "close")
			f.keepAlive = f.keepAlive || HasToken(value, "keep-alive")
		}
	case 14:
		if EqualFold(name, "content-length") {
			cl, ok := parseContentLength(value, f.contentLength)
			f.contentLength = cl
			return ok
		}
	case 17:
		if EqualFold(name, "transfer-encoding") {
			if f.chunked || !EqualFold(value, "chunked") {
				return false
			}
			f.chunked = true
		}
	}
	return true
}

// parseContentLength parses a Content-Length value, a comma list of 1–18
// digit numbers that must all equal each other and prev (unless prev is -1).
func parseContentLength(v []byte, prev int64) (int64, bool) {
	for {
		elem := v
		k := bytes.IndexByte(v, ',')
		if k >= 0 {
			elem, v = v[:k], v[k+1:]
		}
		elem = trimOWS(elem)
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

// splitField splits a field line into its name and its value without
// surrounding whitespace; ok is false if the line is not a valid field.
func splitField(line []byte) (name, value []byte, ok bool) {
	k := 0
	for k < len(line) && classes[line[k]]&classToken != 0 {
		k++
	}
	// An obs-fold line starts with SP or HTAB: k == 0 refuses it too.
	if k == 0 || k == len(line) || line[k] != ':' || !validValue(line[k+1:]) {
		return nil, nil, false
	}
	return line[:k], trimOWS(line[k+1:]), true
}

// validValue reports whether every byte of v may appear in a field value.
func validValue(v []byte) bool {
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
			if classes[c]&classValue == 0 {
				return false
			}
		}
	}
	for _, c := range v {
		if classes[c]&classValue == 0 {
			return false
		}
	}
	return true
}

// trimOWS trims spaces and tabs from both ends of v.
func trimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// HasToken reports whether a comma-separated header value contains tok, case-insensitively, ignoring spaces/tabs around elements.
func HasToken(v []byte, tok string) bool {
	for {
		elem := v
		k := bytes.IndexByte(v, ',')
		if k >= 0 {
			elem, v = v[:k], v[k+1:]
		}
		if EqualFold(trimOWS(elem), tok) {
			return true
		}
		if k < 0 {
			return false
		}
	}
}

// EqualFold reports whether ASCII b equals lower-case s case-insensitively (no allocation).
func EqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

// lower maps ASCII upper-case letters to lower case.
func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Get returns the value of the first header field named name (any case).
func (h *Request) Get(name []byte) []byte { return fieldValue(h.Fields, name) }

func (h *Response) Get(name []byte) []byte { return fieldValue(h.Fields, name) }

func fieldValue(hdrs []Field, name []byte) []byte {
	for i := range hdrs {
		if len(hdrs[i].Name) == len(name) && bytes.EqualFold(hdrs[i].Name, name) {
			return hdrs[i].Value
		}
	}
	return nil
}
