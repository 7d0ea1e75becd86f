package router

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"testing"
	"unsafe"
)

// h1TypicalRequest is a 253-byte request head with 6 header fields.
const h1TypicalRequest = "GET /v1/inquiries/8f14e45f?expand=answers HTTP/1.1\r\n" +
	"Host: api.cellkit.example\r\n" +
	"User-Agent: cellkit-client/1.4\r\n" +
	"Accept: application/json\r\n" +
	"Authorization: Bearer ck_live_0123456789abcdef\r\n" +
	"X-Request-Id: 01HZX3K9T6Q8W2N4M5P7R9S1V3\r\n" +
	"Connection: keep-alive\r\n\r\n"

// h1TypicalResponse is a response head with 6 header fields.
const h1TypicalResponse = "HTTP/1.1 200 OK\r\n" +
	"Content-Type: application/json\r\n" +
	"Content-Length: 1234\r\n" +
	"Date: Mon, 02 Jun 2025 10:00:00 GMT\r\n" +
	"Cache-Control: no-store\r\n" +
	"X-Request-Id: 01HZX3K9T6Q8W2N4M5P7R9S1V3\r\n" +
	"X-Cell: cell-07\r\n\r\n"

// h1Big is the maxBytes of tests that are not about the limit.
const h1Big = 1 << 16

// h1Req parses buf as a request head with a fresh header array.
func h1Req(buf []byte, maxBytes int) (*reqHead, int, error) {
	var arr [maxHeaders]hdr
	h := &reqHead{hdrs: arr[:0]}
	n, err := parseRequest(buf, h, maxBytes)
	return h, n, err
}

// h1Resp parses buf as a response head with a fresh header array.
func h1Resp(buf []byte, maxBytes int) (*respHead, int, error) {
	var arr [maxHeaders]hdr
	h := &respHead{hdrs: arr[:0]}
	n, err := parseResponse(buf, h, maxBytes)
	return h, n, err
}

// h1ReqString summarizes a request head for comparisons in tests.
func h1ReqString(h *reqHead) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s path=%s", h.method, h.target, h.path)
	if h.query != nil {
		fmt.Fprintf(&b, " query=%s", h.query)
	}
	fmt.Fprintf(&b, " 1.%d", h.minor)
	if h.contentLength != -1 {
		fmt.Fprintf(&b, " cl=%d", h.contentLength)
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{h.chunked, "chunked"}, {h.close, "close"}, {h.keepAlive10, "ka10"}, {h.expectContinue, "expect"}} {
		if f.on {
			b.WriteString(" " + f.name)
		}
	}
	if h.host != nil {
		fmt.Fprintf(&b, " host=%q", h.host)
	}
	fmt.Fprintf(&b, " hdrs=%d", len(h.hdrs))
	return b.String()
}

// h1RespString summarizes a response head for comparisons in tests.
func h1RespString(h *respHead) string {
	s := fmt.Sprintf("%d 1.%d", h.status, h.minor)
	if h.contentLength != -1 {
		s += fmt.Sprintf(" cl=%d", h.contentLength)
	}
	if h.chunked {
		s += " chunked"
	}
	if h.close {
		s += " close"
	}
	return s + fmt.Sprintf(" hdrs=%d", len(h.hdrs))
}

// h1FieldLines is n header lines "X-N: v".
func h1FieldLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "X-%d: v\r\n", i)
	}
	return b.String()
}

// h1ValidRequests are valid request heads; tail follows the head in the buffer.
var h1ValidRequests = []struct {
	name, head, tail, want string
}{
	{"typical", h1TypicalRequest, "",
		`GET /v1/inquiries/8f14e45f?expand=answers path=/v1/inquiries/8f14e45f query=?expand=answers 1.1 host="api.cellkit.example" hdrs=6`},
	{"minimal 1.1 keeps alive, no Host is fine", "GET / HTTP/1.1\r\n\r\n", "", `GET / path=/ 1.1 hdrs=0`},
	{"1.1 close", "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", "", `GET / path=/ 1.1 close host="a" hdrs=2`},
	{"1.1 token list", "GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n", "", `GET / path=/ 1.1 close hdrs=1`},
	{"1.1 token list spaces and tabs", "GET / HTTP/1.1\r\nConnection: Upgrade ,\t CLOSE \t\r\n\r\n", "", `GET / path=/ 1.1 close hdrs=1`},
	{"1.1 close in second field", "GET / HTTP/1.1\r\nConnection: foo\r\nconnection: close\r\n\r\n", "", `GET / path=/ 1.1 close hdrs=2`},
	{"1.1 closed is not close", "GET / HTTP/1.1\r\nConnection: closed, x-close\r\n\r\n", "", `GET / path=/ 1.1 hdrs=1`},
	{"1.1 keep-alive", "GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n", "", `GET / path=/ 1.1 hdrs=1`},
	{"1.0 closes", "GET / HTTP/1.0\r\n\r\n", "", `GET / path=/ 1.0 close hdrs=0`},
	{"1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", "", `GET / path=/ 1.0 ka10 hdrs=1`},
	{"1.0 keep-alive and close", "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", "", `GET / path=/ 1.0 close hdrs=1`},
	{"1.0 other token", "GET / HTTP/1.0\r\nConnection: upgrade\r\n\r\n", "", `GET / path=/ 1.0 close hdrs=1`},
	{"expect", "PUT /x HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n", "abc", `PUT /x path=/x 1.1 cl=3 expect hdrs=2`},
	{"other expect", "PUT /x HTTP/1.1\r\nExpect: 100-continue, x\r\n\r\n", "", `PUT /x path=/x 1.1 hdrs=1`},
	{"host trimmed", "GET / HTTP/1.1\r\nhOST: \t example.com:8080 \t\r\n\r\n", "", `GET / path=/ 1.1 host="example.com:8080" hdrs=1`},
	{"empty host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", "", `GET / path=/ 1.1 host="" hdrs=1`},
	{"absolute-form", "GET http://example.com/p/q?a=1 HTTP/1.1\r\nHost: example.com\r\n\r\n", "",
		`GET http://example.com/p/q?a=1 path=/p/q query=?a=1 1.1 host="example.com" hdrs=1`},
	{"absolute-form empty path", "GET HTTPS://h:8080 HTTP/1.1\r\n\r\n", "", `GET HTTPS://h:8080 path=/ 1.1 hdrs=0`},
	{"absolute-form empty path query", "GET http://h?x HTTP/1.1\r\n\r\n", "", `GET http://h?x path=/ query=?x 1.1 hdrs=0`},
	{"absolute-form other scheme", "GET web+x.y-z://u@h/a/ HTTP/1.1\r\n\r\n", "", `GET web+x.y-z://u@h/a/ path=/a/ 1.1 hdrs=0`},
	{"asterisk-form", "OPTIONS * HTTP/1.1\r\n\r\n", "", `OPTIONS * path=* 1.1 hdrs=0`},
	{"empty query", "GET /p? HTTP/1.1\r\n\r\n", "", `GET /p? path=/p query=? 1.1 hdrs=0`},
	{"two question marks", "GET /p?a?b HTTP/1.1\r\n\r\n", "", `GET /p?a?b path=/p query=?a?b 1.1 hdrs=0`},
	{"odd method and target bytes", "M_!#$%&'*+-.^`|~ /%7e\"<>{}\\ HTTP/1.1\r\n\r\n", "",
		"M_!#$%&'*+-.^`|~ /%7e\"<>{}\\ path=/%7e\"<>{}\\ 1.1 hdrs=0"},
	{"20-byte method", "ABCDEFGHIJKLMNOPQRST / HTTP/1.1\r\n\r\n", "", `ABCDEFGHIJKLMNOPQRST / path=/ 1.1 hdrs=0`},
	{"8192-byte target", "GET /" + strings.Repeat("a", 8191) + " HTTP/1.1\r\n\r\n", "",
		"GET /" + strings.Repeat("a", 8191) + " path=/" + strings.Repeat("a", 8191) + " 1.1 hdrs=0"},
	{"content-length", "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n", "abc", `POST / path=/ 1.1 cl=3 hdrs=1`},
	{"content-length 0", "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "", `POST / path=/ 1.1 cl=0 hdrs=1`},
	{"content-length leading zeros", "POST / HTTP/1.1\r\nContent-Length: 007\r\n\r\n", "", `POST / path=/ 1.1 cl=7 hdrs=1`},
	{"content-length 18 digits", "POST / HTTP/1.1\r\nContent-Length: 999999999999999999\r\n\r\n", "", `POST / path=/ 1.1 cl=999999999999999999 hdrs=1`},
	{"content-length repeated", "POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length:5 \r\n\r\n", "", `POST / path=/ 1.1 cl=5 hdrs=2`},
	{"content-length list", "POST / HTTP/1.1\r\nContent-Length: 5,5 , 5\r\n\r\n", "", `POST / path=/ 1.1 cl=5 hdrs=1`},
	{"chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "0\r\n\r\n", `POST / path=/ 1.1 chunked hdrs=1`},
	{"chunked any case", "POST / HTTP/1.1\r\ntransfer-encoding:  CHUNKED \r\n\r\n", "", `POST / path=/ 1.1 chunked hdrs=1`},
	{"bare LF", "GET /a HTTP/1.1\nHost: a\nConnection: close\n\n", "", `GET /a path=/a 1.1 close host="a" hdrs=2`},
	{"mixed line ends", "GET /a HTTP/1.1\nHost: a\r\n\n", "", `GET /a path=/a 1.1 host="a" hdrs=1`},
	{"leading empty lines", "\r\n\n\r\n\nGET / HTTP/1.1\r\n\r\n", "", `GET / path=/ 1.1 hdrs=0`},
	{"pipelined", "GET /1 HTTP/1.1\r\n\r\n", "GET /2 HTTP/1.1\r\n\r\n", `GET /1 path=/1 1.1 hdrs=0`},
	{"value bytes", "GET / HTTP/1.1\r\nX:a\tb  c\x80\xff~\r\nX-Empty:\r\nX-Blank: \t \r\n\r\n", "", `GET / path=/ 1.1 hdrs=3`},
	{"token name bytes", "GET / HTTP/1.1\r\n!#$%&'*+-.^_`|~09azAZ: v\r\n\r\n", "", `GET / path=/ 1.1 hdrs=1`},
	{"64 fields", "GET / HTTP/1.1\r\n" + h1FieldLines(64) + "\r\n", "", `GET / path=/ 1.1 hdrs=64`},
}

func TestParseRequest(t *testing.T) {
	for _, tc := range h1ValidRequests {
		t.Run(tc.name, func(t *testing.T) {
			buf := []byte(tc.head + tc.tail)
			h, n, err := h1Req(buf, h1Big)
			if err != nil || n != len(tc.head) {
				t.Fatalf("parseRequest = %d, %v; want %d, nil", n, err, len(tc.head))
			}
			if got := h1ReqString(h); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			// Every shorter prefix is an incomplete head, not an error.
			for k := range n {
				if _, n, err := h1Req(buf[:k], h1Big); n != 0 || err != nil {
					t.Fatalf("prefix %d: parseRequest = %d, %v; want 0, nil", k, n, err)
				}
			}
			// The head fits in exactly n bytes, not in n-1.
			if _, m, err := h1Req(buf, n); m != n || err != nil {
				t.Errorf("maxBytes %d: parseRequest = %d, %v; want %d, nil", n, m, err, n)
			}
			if _, m, err := h1Req(buf, n-1); m != 0 || err != errHeaderTooLarge {
				t.Errorf("maxBytes %d: parseRequest = %d, %v; want 0, errHeaderTooLarge", n-1, m, err)
			}
		})
	}
}

func TestParseRequestFields(t *testing.T) {
	buf := []byte("GET / HTTP/1.1\r\nHost:  a b \r\nX-Empty:\r\nx-tab:\tv\t\r\nX-Obs: \xff\r\n\r\n")
	h, _, err := h1Req(buf, h1Big)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Host", "a b", "X-Empty", "", "x-tab", "v", "X-Obs", "\xff"}
	var got []string
	for _, f := range h.hdrs {
		got = append(got, string(f.name), string(f.value))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("fields %q; want %q", got, want)
	}
	for _, f := range h.hdrs {
		if !h1Within(buf, f.name) || !h1Within(buf, f.value) {
			t.Errorf("field %q: %q does not view the buffer", f.name, f.value)
		}
	}
}

func TestParseRequestResets(t *testing.T) {
	var arr [maxHeaders]hdr
	h := &reqHead{hdrs: arr[:0]}
	first := "POST /a?b HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n"
	if _, err := parseRequest([]byte(first), h, h1Big); err != nil {
		t.Fatal(err)
	}
	if _, err := parseRequest([]byte("GET / HTTP/1.1\r\n\r\n"), h, h1Big); err != nil {
		t.Fatal(err)
	}
	if got, want := h1ReqString(h), "GET / path=/ 1.1 hdrs=0"; got != want {
		t.Errorf("after reuse got %s; want %s", got, want)
	}
	if cap(h.hdrs) != maxHeaders || &h.hdrs[:1][0] != &arr[0] {
		t.Errorf("parseRequest replaced the caller's header array")
	}
}

func TestParseRequestLimits(t *testing.T) {
	head := "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	for _, tc := range []struct {
		name     string
		buf      string
		maxBytes int
		n        int
		err      error
	}{
		{"fits exactly", head, len(head), len(head), nil},
		{"one byte short", head, len(head) - 1, 0, errHeaderTooLarge},
		{"incomplete below limit", head[:10], 11, 0, nil},
		{"incomplete at limit", head[:10], 10, 0, errHeaderTooLarge},
		{"incomplete over limit", head[:len(head)-1] + "xxxx", len(head), 0, errHeaderTooLarge},
		{"zero limit", head, 0, 0, errHeaderTooLarge},
		{"negative limit", head, -1, 0, errHeaderTooLarge},
		{"empty buffer", "", 10, 0, nil},
		{"65 fields", "GET / HTTP/1.1\r\n" + h1FieldLines(65) + "\r\n", h1Big, 0, errHeaderTooLarge},
		{"65 fields, head unfinished", "GET / HTTP/1.1\r\n" + h1FieldLines(65), h1Big, 0, errHeaderTooLarge},
		{"too many empty lines", "\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n", h1Big, 0, errMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, n, err := h1Req([]byte(tc.buf), tc.maxBytes)
			if n != tc.n || err != tc.err {
				t.Errorf("parseRequest = %d, %v; want %d, %v", n, err, tc.n, tc.err)
			}
		})
	}
}

// h1BadRequests are request heads that are errMalformed. Some lack the final
// empty line: errors are found as soon as a line is whole.
var h1BadRequests = []struct{ name, buf string }{
	// request line
	{"empty method", " / HTTP/1.1\r\n\r\n"},
	{"21-byte method", "ABCDEFGHIJKLMNOPQRSTU / HTTP/1.1\r\n\r\n"},
	{"21-byte method, line unfinished", "ABCDEFGHIJKLMNOPQRSTU"},
	{"method not a token", "GE(T / HTTP/1.1\r\n\r\n"},
	{"NUL in method", "GE\x00T / HTTP/1.1\r\n\r\n"},
	{"TLS hello, line unfinished", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"},
	{"leading space", " GET / HTTP/1.1\r\n\r\n"},
	{"two spaces", "GET  / HTTP/1.1\r\n\r\n"},
	{"tab separator", "GET\t/ HTTP/1.1\r\n\r\n"},
	{"space in target", "GET /a b HTTP/1.1\r\n\r\n"},
	{"DEL in target", "GET /\x7f HTTP/1.1\r\n\r\n"},
	{"obs-text in target", "GET /\x80 HTTP/1.1\r\n\r\n"},
	{"NUL in target", "GET /\x00 HTTP/1.1\r\n\r\n"},
	{"8193-byte target", "GET /" + strings.Repeat("a", 8192) + " HTTP/1.1\r\n\r\n"},
	{"no target", "GET HTTP/1.1\r\n\r\n"},
	{"no version", "GET /\r\n\r\n"},
	{"HTTP/0.9 style", "GET /\r\n"},
	{"HTTP/1.2", "GET / HTTP/1.2\r\n\r\n"},
	{"HTTP/2.0", "GET / HTTP/2.0\r\n\r\n"},
	{"lower-case version", "GET / http/1.1\r\n\r\n"},
	{"HTTP/1.10", "GET / HTTP/1.10\r\n\r\n"},
	{"HTTP/1", "GET / HTTP/1\r\n\r\n"},
	{"space after version", "GET / HTTP/1.1 \r\n\r\n"},
	{"extra word", "GET / HTTP/1.1 x\r\n\r\n"},
	{"bare CR ends request line", "GET / HTTP/1.1\rHost: a\r\n\r\n"},
	{"CR CR LF", "GET / HTTP/1.1\r\r\n\r\n"},
	{"authority-form", "CONNECT example.com:443 HTTP/1.1\r\n\r\n"},
	{"relative path", "GET a/b HTTP/1.1\r\n\r\n"},
	{"empty authority", "GET http:///p HTTP/1.1\r\n\r\n"},
	{"no authority", "GET http:// HTTP/1.1\r\n\r\n"},
	{"no scheme", "GET ://h/p HTTP/1.1\r\n\r\n"},
	{"scheme starts with digit", "GET 1http://h/ HTTP/1.1\r\n\r\n"},
	{"single slash", "GET http:/h/p HTTP/1.1\r\n\r\n"},
	{"query before scheme end", "GET ht?tp://h/ HTTP/1.1\r\n\r\n"},
	{"asterisk with more", "OPTIONS *x HTTP/1.1\r\n\r\n"},
	{"5 empty lines", "\n\n\n\n\nGET / HTTP/1.1\r\n\r\n"},
	// field lines
	{"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n"},
	{"tab before colon, head unfinished", "GET / HTTP/1.1\r\nHost\t: a\r\n"},
	{"no colon", "GET / HTTP/1.1\r\nHost a\r\n\r\n"},
	{"empty name", "GET / HTTP/1.1\r\n: a\r\n\r\n"},
	{"name not a token", "GET / HTTP/1.1\r\nX(y): a\r\n\r\n"},
	{"space in name", "GET / HTTP/1.1\r\nX y: a\r\n\r\n"},
	{"obs-fold", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"},
	{"obs-fold tab", "GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n"},
	{"first field folded", "GET / HTTP/1.1\r\n Host: a\r\n\r\n"},
	{"NUL in value", "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n"},
	{"DEL in value", "GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n"},
	{"VT in value", "GET / HTTP/1.1\r\nX: a\vb\r\n\r\n"},
	{"ESC in value", "GET / HTTP/1.1\r\nX: \x1b[0m\r\n\r\n"},
	{"bare CR in value", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n"},
	{"bare CR ends value", "GET / HTTP/1.1\r\nX: a\r\r\n\r\n"},
	{"bare CR before empty line", "GET / HTTP/1.1\r\nX: a\r\n\r\r\n"},
	// Content-Length
	{"empty content-length", "POST / HTTP/1.1\r\nContent-Length:\r\n\r\n"},
	{"blank content-length", "POST / HTTP/1.1\r\nContent-Length:  \r\n\r\n"},
	{"plus sign", "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n"},
	{"minus sign", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"},
	{"space inside", "POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n"},
	{"hex", "POST / HTTP/1.1\r\nContent-Length: 0x5\r\n\r\n"},
	{"trailing letter", "POST / HTTP/1.1\r\nContent-Length: 5a\r\n\r\n"},
	{"19 digits", "POST / HTTP/1.1\r\nContent-Length: 1000000000000000000\r\n\r\n"},
	{"different list values", "POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n"},
	{"different fields", "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"},
	{"empty list element", "POST / HTTP/1.1\r\nContent-Length: 5,,5\r\n\r\n"},
	{"trailing comma", "POST / HTTP/1.1\r\nContent-Length: 5,\r\n\r\n"},
	{"leading comma", "POST / HTTP/1.1\r\nContent-Length: ,5\r\n\r\n"},
	// Transfer-Encoding
	{"gzip", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"},
	{"identity", "POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n"},
	{"gzip, chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"},
	{"chunked, chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"},
	{"two chunked fields", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"},
	{"chunked with parameter", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked;q=1\r\n\r\n"},
	{"empty transfer-encoding", "POST / HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n"},
	{"chunked-ish", "POST / HTTP/1.1\r\nTransfer-Encoding: chunke\r\n\r\n"},
	{"transfer-encoding in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"},
	{"content-length then chunked", "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"},
	{"chunked then content-length", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"},
	// Host
	{"two Host fields", "GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n"},
	{"two Host fields, one empty", "GET / HTTP/1.1\r\nHost:\r\nHost: b\r\n\r\n"},
}

func TestParseRequestMalformed(t *testing.T) {
	for _, tc := range h1BadRequests {
		t.Run(tc.name, func(t *testing.T) {
			if _, n, err := h1Req([]byte(tc.buf), h1Big); n != 0 || err != errMalformed {
				t.Errorf("parseRequest(%.60q) = %d, %v; want 0, errMalformed", tc.buf, n, err)
			}
		})
	}
}

func TestParseRequestDoesNotAllocate(t *testing.T) {
	buf := []byte(h1TypicalRequest)
	var arr [maxHeaders]hdr
	var h reqHead
	allocs := testing.AllocsPerRun(1000, func() {
		h.hdrs = arr[:0]
		if n, err := parseRequest(buf, &h, 8192); n != len(buf) || err != nil {
			t.Fatalf("parseRequest = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("parseRequest allocates %v times per run; want 0", allocs)
	}
	resp := []byte(h1TypicalResponse)
	var rh respHead
	allocs = testing.AllocsPerRun(1000, func() {
		rh.hdrs = arr[:0]
		if n, err := parseResponse(resp, &rh, 8192); n != len(resp) || err != nil {
			t.Fatalf("parseResponse = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("parseResponse allocates %v times per run; want 0", allocs)
	}
}

func TestParseResponse(t *testing.T) {
	for _, tc := range []struct {
		name, head, tail, want string
	}{
		{"typical", h1TypicalResponse, "", "200 1.1 cl=1234 hdrs=6"},
		{"no reason", "HTTP/1.1 404\r\n\r\n", "", "404 1.1 hdrs=0"},
		{"empty reason", "HTTP/1.1 204 \r\n\r\n", "", "204 1.1 hdrs=0"},
		{"reason bytes", "HTTP/1.1 299 Fine \t\x80\xff ~!\r\n\r\n", "", "299 1.1 hdrs=0"},
		{"100", "HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\n", "100 1.1 hdrs=0"},
		{"999", "HTTP/1.1 999 X\r\n\r\n", "", "999 1.1 hdrs=0"},
		{"close", "HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\n\r\n", "", "200 1.1 close hdrs=1"},
		{"1.0 closes", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n", "ok", "200 1.0 cl=2 close hdrs=1"},
		{"1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", "", "200 1.0 hdrs=1"},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n", "0\r\n\r\n", "200 1.1 chunked hdrs=1"},
		{"content-length list", "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\ncontent-length: 3\r\n\r\n", "abc", "200 1.1 cl=3 hdrs=2"},
		{"two Host fields are not checked", "HTTP/1.1 200 OK\r\nHost: a\r\nHost: b\r\n\r\n", "", "200 1.1 hdrs=2"},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", "", "200 1.1 cl=0 hdrs=1"},
		{"64 fields", "HTTP/1.1 200 OK\r\n" + h1FieldLines(64) + "\r\n", "", "200 1.1 hdrs=64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := []byte(tc.head + tc.tail)
			h, n, err := h1Resp(buf, h1Big)
			if err != nil || n != len(tc.head) {
				t.Fatalf("parseResponse = %d, %v; want %d, nil", n, err, len(tc.head))
			}
			if got := h1RespString(h); got != tc.want {
				t.Errorf("got %s; want %s", got, tc.want)
			}
			for k := range n {
				if _, n, err := h1Resp(buf[:k], h1Big); n != 0 || err != nil {
					t.Fatalf("prefix %d: parseResponse = %d, %v; want 0, nil", k, n, err)
				}
			}
			if _, m, err := h1Resp(buf, n-1); m != 0 || err != errHeaderTooLarge {
				t.Errorf("maxBytes %d: parseResponse = %d, %v; want 0, errHeaderTooLarge", n-1, m, err)
			}
		})
	}
}

func TestParseResponseMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, buf string
		err       error
	}{
		{"status 099", "HTTP/1.1 099 X\r\n\r\n", errMalformed},
		{"status 000", "HTTP/1.1 000 X\r\n\r\n", errMalformed},
		{"two digits", "HTTP/1.1 20 OK\r\n\r\n", errMalformed},
		{"four digits", "HTTP/1.1 2000 OK\r\n\r\n", errMalformed},
		{"letters", "HTTP/1.1 2x0 OK\r\n\r\n", errMalformed},
		{"no space before reason", "HTTP/1.1 200OK\r\n\r\n", errMalformed},
		{"two spaces", "HTTP/1.1  200 OK\r\n\r\n", errMalformed},
		{"no status", "HTTP/1.1\r\n\r\n", errMalformed},
		{"HTTP/1.2", "HTTP/1.2 200 OK\r\n\r\n", errMalformed},
		{"HTTP/2", "HTTP/2 200 OK\r\n\r\n", errMalformed},
		{"lower-case", "http/1.1 200 OK\r\n\r\n", errMalformed},
		{"NUL in reason", "HTTP/1.1 200 O\x00K\r\n\r\n", errMalformed},
		{"bare CR in reason", "HTTP/1.1 200 OK\rX: y\r\n\r\n", errMalformed},
		{"leading empty line", "\r\nHTTP/1.1 200 OK\r\n\r\n", errMalformed},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\n", errMalformed},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", errMalformed},
		{"control in value", "HTTP/1.1 200 OK\r\nX: \x01\r\n\r\n", errMalformed},
		{"bad content-length", "HTTP/1.1 200 OK\r\nContent-Length: 1.0\r\n\r\n", errMalformed},
		{"different content-lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", errMalformed},
		{"gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", errMalformed},
		{"chunked twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", errMalformed},
		{"chunked and content-length", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", errMalformed},
		{"content-length and chunked", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", errMalformed},
		{"chunked in HTTP/1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", errMalformed},
		{"65 fields", "HTTP/1.1 200 OK\r\n" + h1FieldLines(65) + "\r\n", errHeaderTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, n, err := h1Resp([]byte(tc.buf), h1Big); n != 0 || err != tc.err {
				t.Errorf("parseResponse(%q) = %d, %v; want 0, %v", tc.buf, n, err, tc.err)
			}
		})
	}
}

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
		{"64 trailers", "0\r\n" + h1FieldLines(64) + "\r\n", "", "", 0},
		{"max exactly", "3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n", "", "abcdef", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := []byte(tc.body + tc.tail)
			dst := []byte("pre:")
			body, n, err := chunkedBody(buf, dst, tc.max)
			if err != nil || n != len(tc.body) || string(body) != "pre:"+tc.want {
				t.Fatalf("chunkedBody = %q, %d, %v; want %q, %d, nil", body, n, err, "pre:"+tc.want, len(tc.body))
			}
			for k := range n {
				body, n, err := chunkedBody(buf[:k], dst, tc.max)
				if n != 0 || err != nil || string(body) != "pre:" {
					t.Fatalf("prefix %d: chunkedBody = %q, %d, %v; want %q, 0, nil", k, body, n, err, "pre:")
				}
			}
		})
	}
}

func TestChunkedBodyErrors(t *testing.T) {
	long := strings.Repeat("x", h1MaxChunkLine)
	for _, tc := range []struct {
		name, buf string
		max       int
		err       error
	}{
		{"over max", "5\r\nhello\r\n0\r\n\r\n", 4, errBodyTooLarge},
		{"over max before CRLF", "5", 4, errBodyTooLarge},
		{"over max before data", "5\r\n", 4, errBodyTooLarge},
		{"over max in total", "3\r\nabc\r\n2\r\n", 4, errBodyTooLarge},
		{"over max digits so far", "10", 15, errBodyTooLarge},
		{"huge", "fffffffffffffff\r\n", 1 << 30, errBodyTooLarge},
		{"negative max", "1\r\n", -1, errBodyTooLarge},
		{"16 digits", "0000000000000005\r\nhello\r\n0\r\n\r\n", 10, errMalformed},
		{"16 digits unfinished", "0000000000000000", 10, errMalformed},
		{"no size", "\r\nhello\r\n0\r\n\r\n", 10, errMalformed},
		{"not hex", "x\r\n", 10, errMalformed},
		{"sign", "+5\r\nhello\r\n0\r\n\r\n", 10, errMalformed},
		{"0x", "0x5\r\nhello\r\n0\r\n\r\n", 10, errMalformed},
		{"leading space", " 5\r\nhello\r\n0\r\n\r\n", 10, errMalformed},
		{"trailing space", "5 \r\nhello\r\n0\r\n\r\n", 10, errMalformed},
		{"junk after size", "5x\r\nhello\r\n0\r\n\r\n", 10, errMalformed},
		{"bare LF after size", "5\nhello\r\n0\r\n\r\n", 10, errMalformed},
		{"bare CR after size", "5\rhello\r\n0\r\n\r\n", 10, errMalformed},
		{"CR CR LF after size", "5\r\r\nhello\r\n0\r\n\r\n", 10, errMalformed},
		{"NUL in extension", "5;a\x00\r\nhello\r\n0\r\n\r\n", 10, errMalformed},
		{"CR in extension", "5;a\rb\r\nhello\r\n0\r\n\r\n", 10, errMalformed},
		{"data too long", "5\r\nhello!\r\n0\r\n\r\n", 10, errMalformed},
		{"data too long, unfinished", "5\r\nhello!", 10, errMalformed},
		{"no CRLF after data", "5\r\nhello0\r\n\r\n", 10, errMalformed},
		{"bare LF after data", "5\r\nhello\n0\r\n\r\n", 10, errMalformed},
		{"CR X after data", "5\r\nhello\rX0\r\n\r\n", 10, errMalformed},
		{"bare LF at end", "0\r\n\n", 10, errMalformed},
		{"bare LF after trailer", "0\r\nX: y\n\r\n", 10, errMalformed},
		{"bad trailer", "0\r\nnot a field\r\n\r\n", 10, errMalformed},
		{"trailer space before colon", "0\r\nX : y\r\n\r\n", 10, errMalformed},
		{"trailer obs-fold", "0\r\nX: y\r\n z\r\n\r\n", 10, errMalformed},
		{"trailer control", "0\r\nX: \x00\r\n\r\n", 10, errMalformed},
		{"long size line", "1;" + long + "\r\nx\r\n0\r\n\r\n", 10, errMalformed},
		{"long size line, unfinished", "1;" + long, 10, errMalformed},
		{"long trailer", "0\r\nX: " + long + "\r\n\r\n", 10, errMalformed},
		{"65 trailers", "0\r\n" + h1FieldLines(65) + "\r\n", 10, errHeaderTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("pre:")
			body, n, err := chunkedBody([]byte(tc.buf), dst, tc.max)
			if n != 0 || err != tc.err || string(body) != "pre:" {
				t.Errorf("chunkedBody(%.40q) = %q, %d, %v; want %q, 0, %v", tc.buf, body, n, err, "pre:", tc.err)
			}
		})
	}
	// The longest size line is accepted.
	ok := "1;" + strings.Repeat("x", h1MaxChunkLine-2) + "\r\nx\r\n0\r\n\r\n"
	if body, n, err := chunkedBody([]byte(ok), nil, 1); err != nil || n != len(ok) || string(body) != "x" {
		t.Errorf("longest size line: chunkedBody = %q, %d, %v", body, n, err)
	}
}

func TestChunkedBodyAllocs(t *testing.T) {
	buf := []byte("3\r\nabc\r\n3\r\ndef\r\n3;x\r\nghi\r\n0\r\nX: y\r\n\r\n")
	room := make([]byte, 0, 64)
	if allocs := testing.AllocsPerRun(100, func() {
		if body, _, err := chunkedBody(buf, room, 64); err != nil || string(body) != "abcdefghi" {
			t.Fatalf("chunkedBody = %q, %v", body, err)
		}
	}); allocs != 0 {
		t.Errorf("chunkedBody into a large enough dst allocates %v times; want 0", allocs)
	}
}

// feedChunked decodes body arriving in pieces of step bytes, keeping what
// the decoder leaves unconsumed as a reader would, and returns the data,
// the bytes of body the decoder consumed in all, and the first error.
func feedChunked(body []byte, step, max int) (data []byte, consumed int, done bool, err error) {
	var d chunkDecoder
	var pending []byte
	for off := 0; off < len(body) && !done; off += step {
		pending = append(pending, body[off:min(off+step, len(body))]...)
		var n int
		n, done, err = d.decode(pending, &data, max)
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
	if err != errMalformed {
		t.Fatalf("1-byte chunks with 4000-byte extensions: err %v; want errMalformed", err)
	}
	if n > h1MaxChunkExcess+h1MaxChunkLine+64 {
		t.Errorf("consumed %d bytes before refusing; want at most about %d", n, h1MaxChunkExcess)
	}
	// Long trailers count too.
	var tr strings.Builder
	tr.WriteString("0\r\n")
	for range 60 {
		tr.WriteString("X: " + strings.Repeat("t", 1000) + "\r\n")
	}
	tr.WriteString("\r\n")
	if _, _, err := chunkedBody([]byte(tr.String()), nil, 10); err != errMalformed {
		t.Errorf("60 KB of trailers: err %v; want errMalformed", err)
	}
	// Framing paid for by data is fine: many small chunks with short extensions.
	var ok strings.Builder
	for range 5000 {
		ok.WriteString("4;k=v\r\nabcd\r\n")
	}
	ok.WriteString("0\r\n\r\n")
	if data, _, err := chunkedBody([]byte(ok.String()), nil, 1<<20); err != nil || len(data) != 20000 {
		t.Errorf("5000 chunks of 4 bytes: %d bytes, %v; want 20000, nil", len(data), err)
	}
}

func TestHasToken(t *testing.T) {
	for _, tc := range []struct {
		v, tok string
		want   bool
	}{
		{"close", "close", true},
		{"Close", "close", true},
		{"CLOSE", "close", true},
		{" \tclose\t ", "close", true},
		{"keep-alive, Close", "close", true},
		{"a,b,,close,", "close", true},
		{"Upgrade,close", "upgrade", true},
		{"closed", "close", false},
		{"clos", "close", false},
		{"x-close, close-x", "close", false},
		{"clo se", "close", false},
		{"", "close", false},
		{",", "close", false},
		{"", "", true}, // an empty element matches an empty token
	} {
		if got := hasToken([]byte(tc.v), tc.tok); got != tc.want {
			t.Errorf("hasToken(%q, %q) = %v; want %v", tc.v, tc.tok, got, tc.want)
		}
	}
}

func TestEqualFold(t *testing.T) {
	for _, tc := range []struct {
		b, s string
		want bool
	}{
		{"host", "host", true},
		{"HoSt", "host", true},
		{"HOST", "host", true},
		{"hosts", "host", false},
		{"hos", "host", false},
		{"", "", true},
		{"@", "`", false}, // only letters fold
		{"[", "{", false},
		{"\xc4", "\xe4", false}, // ASCII only
		{"Content-Length", "content-length", true},
		{"Content_Length", "content-length", false},
	} {
		if got := equalFold([]byte(tc.b), tc.s); got != tc.want {
			t.Errorf("equalFold(%q, %q) = %v; want %v", tc.b, tc.s, got, tc.want)
		}
	}
}

// h1Within reports whether s is nil or lies within buf's bytes.
func h1Within(buf, s []byte) bool {
	if s == nil {
		return true
	}
	b := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return p >= b && p+uintptr(len(s)) <= b+uintptr(len(buf))
}

// h1CleanEnds reports whether every CR in head is followed by LF and head has no NUL.
func h1CleanEnds(head []byte) bool {
	for i, c := range head {
		if c == 0 || c == '\r' && (i+1 == len(head) || head[i+1] != '\n') {
			return false
		}
	}
	return true
}

// h1FuzzLimit turns a fuzzed number into a maxBytes or max of 1 to 65536.
func h1FuzzLimit(m uint16) int { return int(m) + 1 }

func FuzzParseRequest(f *testing.F) {
	for _, tc := range h1ValidRequests {
		if len(tc.head) < 1000 {
			f.Add([]byte(tc.head+tc.tail), uint16(4096))
		}
	}
	for _, tc := range h1BadRequests {
		if len(tc.buf) < 1000 {
			f.Add([]byte(tc.buf), uint16(4096))
		}
	}
	f.Add([]byte(h1TypicalRequest), uint16(100))
	f.Fuzz(func(t *testing.T, buf []byte, m uint16) {
		maxBytes := h1FuzzLimit(m)
		h, n, err := h1Req(buf, maxBytes)
		if err != nil || n == 0 {
			if n != 0 {
				t.Fatalf("n = %d with error %v", n, err)
			}
			if err == nil && len(buf) >= maxBytes {
				t.Fatalf("incomplete head of %d bytes with maxBytes %d", len(buf), maxBytes)
			}
			return
		}
		if n > len(buf) || n > maxBytes {
			t.Fatalf("n = %d, len(buf) = %d, maxBytes = %d", n, len(buf), maxBytes)
		}
		for _, s := range [][]byte{h.method, h.target, h.path, h.query, h.host} {
			if !h1Within(buf[:n], s) {
				t.Fatalf("%q is not within the head", s)
			}
		}
		for _, f := range h.hdrs {
			if !h1Within(buf[:n], f.name) || !h1Within(buf[:n], f.value) {
				t.Fatalf("field %q: %q is not within the head", f.name, f.value)
			}
		}
		if len(h.hdrs) > maxHeaders || h.minor > 1 || len(h.method) == 0 || len(h.method) > h1MaxMethod ||
			len(h.path) == 0 || h.chunked && h.contentLength >= 0 || h.chunked && h.minor == 0 ||
			h.keepAlive10 && (h.close || h.minor != 0) || !h1CleanEnds(buf[:n]) ||
			!bytes.HasSuffix(buf[:n], []byte("\n\n")) && !bytes.HasSuffix(buf[:n], []byte("\n\r\n")) {
			t.Fatalf("accepted %q as %s", buf[:n], h1ReqString(h))
		}
		want := h1ReqString(h)
		h2, n2, err := h1Req(buf[:n], maxBytes)
		if n2 != n || err != nil || h1ReqString(h2) != want {
			t.Fatalf("parsing buf[:n] = %d, %v, %s; want %d, nil, %s", n2, err, h1ReqString(h2), n, want)
		}
		if _, n2, err := h1Req(buf[:n-1], maxBytes); n2 != 0 || err != nil {
			t.Fatalf("parsing buf[:n-1] = %d, %v; want 0, nil", n2, err)
		}
		h1CompareRequest(t, buf[:n], h)
	})
}

// h1CompareRequest checks that, when net/http also accepts head, the two
// agree on the message's framing and routing.
func h1CompareRequest(t *testing.T, head []byte, h *reqHead) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return // stricter or different rules (leading empty lines, URL syntax, Host syntax)
	}
	cl := h.contentLength
	switch {
	case h.chunked:
		cl = -1
	case cl < 0:
		cl = 0
	}
	te := fmt.Sprint(req.TransferEncoding)
	if req.Method != string(h.method) || req.RequestURI != string(h.target) || req.ProtoMinor != h.minor ||
		req.ContentLength != cl || (te == "[chunked]") != h.chunked || req.Close != h.close {
		t.Fatalf("net/http reads %q as %s %s 1.%d cl=%d te=%s close=%v; we as %s",
			head, req.Method, req.RequestURI, req.ProtoMinor, req.ContentLength, te, req.Close, h1ReqString(h))
	}
	if h.target[0] == '/' && req.Host != string(h.host) {
		t.Fatalf("net/http reads host %q, we %q", req.Host, h.host)
	}
}

func FuzzParseResponse(f *testing.F) {
	f.Add([]byte(h1TypicalResponse), uint16(4096))
	f.Add([]byte("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"), uint16(4096))
	f.Add([]byte("HTTP/1.1 204\nContent-Length: 0, 0\nX:\n\n"), uint16(4096))
	f.Add([]byte("HTTP/1.1 99 X\r\nA : b\r\n c\r\n\r\n"), uint16(20))
	f.Fuzz(func(t *testing.T, buf []byte, m uint16) {
		maxBytes := h1FuzzLimit(m)
		h, n, err := h1Resp(buf, maxBytes)
		if err != nil || n == 0 {
			if n != 0 {
				t.Fatalf("n = %d with error %v", n, err)
			}
			if err == nil && len(buf) >= maxBytes {
				t.Fatalf("incomplete head of %d bytes with maxBytes %d", len(buf), maxBytes)
			}
			return
		}
		if n > len(buf) || n > maxBytes {
			t.Fatalf("n = %d, len(buf) = %d, maxBytes = %d", n, len(buf), maxBytes)
		}
		for _, f := range h.hdrs {
			if !h1Within(buf[:n], f.name) || !h1Within(buf[:n], f.value) {
				t.Fatalf("field %q: %q is not within the head", f.name, f.value)
			}
		}
		if len(h.hdrs) > maxHeaders || h.minor > 1 || h.status < 100 || h.status > 999 ||
			h.chunked && h.contentLength >= 0 || h.chunked && h.minor == 0 || !h1CleanEnds(buf[:n]) {
			t.Fatalf("accepted %q as %s", buf[:n], h1RespString(h))
		}
		want := h1RespString(h)
		h2, n2, err := h1Resp(buf[:n], maxBytes)
		if n2 != n || err != nil || h1RespString(h2) != want {
			t.Fatalf("parsing buf[:n] = %d, %v, %s; want %d, nil, %s", n2, err, h1RespString(h2), n, want)
		}
		if _, n2, err := h1Resp(buf[:n-1], maxBytes); n2 != 0 || err != nil {
			t.Fatalf("parsing buf[:n-1] = %d, %v; want 0, nil", n2, err)
		}
		h1CompareResponse(t, buf[:n], h)
	})
}

// h1CompareResponse checks that, when net/http also accepts head, the two
// agree on the framing of a response that may have a body.
func h1CompareResponse(t *testing.T, head []byte, h *respHead) {
	if h.status < 200 || h.status == 204 || h.status == 304 {
		return // net/http knows these have no body
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), nil)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	te := fmt.Sprint(resp.TransferEncoding)
	if resp.StatusCode != h.status || resp.ProtoMinor != h.minor ||
		(te == "[chunked]") != h.chunked || !h.chunked && resp.ContentLength != h.contentLength ||
		(h.chunked || h.contentLength >= 0) && resp.Close != h.close {
		t.Fatalf("net/http reads %q as %d 1.%d cl=%d te=%s close=%v; we as %s",
			head, resp.StatusCode, resp.ProtoMinor, resp.ContentLength, te, resp.Close, h1RespString(h))
	}
}

func FuzzChunkedBody(f *testing.F) {
	f.Add([]byte("5\r\nhello\r\n0\r\n\r\n"), uint16(10))
	f.Add([]byte("3;a=b\r\nabc\r\n2\r\nde\r\n0\r\nX: y\r\n\r\nGET"), uint16(10))
	f.Add([]byte("A\r\n0123456789\r\n0\r\n\r\n"), uint16(5))
	f.Add([]byte("5\nhello\n0\n\n"), uint16(10))
	f.Add([]byte("0000000000000005\r\nhello\r\n0\r\n\r\n"), uint16(10))
	f.Fuzz(func(t *testing.T, buf []byte, m uint16) {
		max := h1FuzzLimit(m)
		dst := []byte("pre:")
		body, n, err := chunkedBody(buf, dst, max)
		if err != nil || n == 0 {
			if n != 0 || string(body) != "pre:" {
				t.Fatalf("chunkedBody = %q, %d, %v", body, n, err)
			}
			return
		}
		if n > len(buf) || !bytes.HasPrefix(body, dst) || len(body)-len(dst) > max ||
			!bytes.HasSuffix(buf[:n], []byte("\r\n\r\n")) {
			t.Fatalf("chunkedBody(%q) = %q, %d", buf, body, n)
		}
		body2, n2, err := chunkedBody(buf[:n], nil, max)
		if n2 != n || err != nil || string(body2) != string(body[len(dst):]) {
			t.Fatalf("chunkedBody(buf[:n]) = %q, %d, %v; want %q, %d, nil", body2, n2, err, body[len(dst):], n)
		}
		if _, n2, err := chunkedBody(buf[:n-1], nil, max); n2 != 0 || err != nil {
			t.Fatalf("chunkedBody(buf[:n-1]) = %d, %v; want 0, nil", n2, err)
		}
		// When net/http's chunked reader accepts the body too, it decodes the same bytes.
		if got, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(buf[:n]))); err == nil &&
			string(got) != string(body[len(dst):]) {
			t.Fatalf("net/http decodes %q as %q; we as %q", buf[:n], got, body[len(dst):])
		}
	})
}

func BenchmarkParseRequest(b *testing.B) {
	buf := []byte(h1TypicalRequest)
	var arr [maxHeaders]hdr
	var h reqHead
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		h.hdrs = arr[:0]
		if _, err := parseRequest(buf, &h, 8192); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseResponse(b *testing.B) {
	buf := []byte(h1TypicalResponse)
	var arr [maxHeaders]hdr
	var h respHead
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		h.hdrs = arr[:0]
		if _, err := parseResponse(buf, &h, 8192); err != nil {
			b.Fatal(err)
		}
	}
}
