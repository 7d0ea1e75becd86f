package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unsafe"
)

// typicalRequest is a 253-byte request head with 6 header fields.
const typicalRequest = "GET /v1/inquiries/8f14e45f?expand=answers HTTP/1.1\r\n" +
	"Host: api.cellkit.example\r\n" +
	"User-Agent: cellkit-client/1.4\r\n" +
	"Accept: application/json\r\n" +
	"Authorization: Bearer ck_live_0123456789abcdef\r\n" +
	"X-Request-Id: 01HZX3K9T6Q8W2N4M5P7R9S1V3\r\n" +
	"Connection: keep-alive\r\n\r\n"

// typicalResponse is a response head with 6 header fields.
const typicalResponse = "HTTP/1.1 200 OK\r\n" +
	"Content-Type: application/json\r\n" +
	"Content-Length: 1234\r\n" +
	"Date: Mon, 02 Jun 2025 10:00:00 GMT\r\n" +
	"Cache-Control: no-store\r\n" +
	"X-Request-Id: 01HZX3K9T6Q8W2N4M5P7R9S1V3\r\n" +
	"X-Cell: cell-07\r\n\r\n"

// bigLimit is the maxBytes of tests that are not about the limit.
const bigLimit = 1 << 16

// parseReq parses buf as a request head with a fresh header array.
func parseReq(buf []byte, maxBytes int) (*Request, int, error) {
	var arr [MaxFields]Field
	h := &Request{Fields: arr[:0]}
	n, err := ParseRequest(buf, h, maxBytes)
	return h, n, err
}

// parseResp parses buf as a response head with a fresh header array.
func parseResp(buf []byte, maxBytes int) (*Response, int, error) {
	var arr [MaxFields]Field
	h := &Response{Fields: arr[:0]}
	n, err := ParseResponse(buf, h, maxBytes)
	return h, n, err
}

// reqString summarizes a request head for comparisons in tests.
func reqString(h *Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s path=%s", h.Method, h.Target, h.Path)
	if h.Query != nil {
		fmt.Fprintf(&b, " query=%s", h.Query)
	}
	fmt.Fprintf(&b, " 1.%d", h.Minor)
	if h.ContentLength != -1 {
		fmt.Fprintf(&b, " cl=%d", h.ContentLength)
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{h.Chunked, "chunked"}, {h.Close, "close"}, {h.KeepAlive10, "ka10"}, {h.ExpectContinue, "expect"}} {
		if f.on {
			b.WriteString(" " + f.name)
		}
	}
	if h.Host != nil {
		fmt.Fprintf(&b, " host=%q", h.Host)
	}
	fmt.Fprintf(&b, " hdrs=%d", len(h.Fields))
	return b.String()
}

// respString summarizes a response head for comparisons in tests.
func respString(h *Response) string {
	s := fmt.Sprintf("%d 1.%d", h.Status, h.Minor)
	if h.ContentLength != -1 {
		s += fmt.Sprintf(" cl=%d", h.ContentLength)
	}
	if h.Chunked {
		s += " chunked"
	}
	if h.Close {
		s += " close"
	}
	return s + fmt.Sprintf(" hdrs=%d", len(h.Fields))
}

// fieldLines is n header lines "X-N: v".
func fieldLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "X-%d: v\r\n", i)
	}
	return b.String()
}

// validRequests are valid request heads; tail follows the head in the buffer.
var validRequests = []struct {
	name, head, tail, want string
}{
	{"typical", typicalRequest, "",
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
	{"64 fields", "GET / HTTP/1.1\r\n" + fieldLines(64) + "\r\n", "", `GET / path=/ 1.1 hdrs=64`},
}

func TestParseRequest(t *testing.T) {
	for _, tc := range validRequests {
		t.Run(tc.name, func(t *testing.T) {
			buf := []byte(tc.head + tc.tail)
			h, n, err := parseReq(buf, bigLimit)
			if err != nil || n != len(tc.head) {
				t.Fatalf("ParseRequest = %d, %v; want %d, nil", n, err, len(tc.head))
			}
			if got := reqString(h); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			// Every shorter prefix is an incomplete head, not an error.
			for k := range n {
				if _, n, err := parseReq(buf[:k], bigLimit); n != 0 || err != nil {
					t.Fatalf("prefix %d: ParseRequest = %d, %v; want 0, nil", k, n, err)
				}
			}
			// The head fits in exactly n bytes, not in n-1.
			if _, m, err := parseReq(buf, n); m != n || err != nil {
				t.Errorf("maxBytes %d: ParseRequest = %d, %v; want %d, nil", n, m, err, n)
			}
			if _, m, err := parseReq(buf, n-1); m != 0 || err != ErrHeaderTooLarge {
				t.Errorf("maxBytes %d: ParseRequest = %d, %v; want 0, ErrHeaderTooLarge", n-1, m, err)
			}
		})
	}
}

func TestParseRequestFields(t *testing.T) {
	buf := []byte("GET / HTTP/1.1\r\nHost:  a b \r\nX-Empty:\r\nx-tab:\tv\t\r\nX-Obs: \xff\r\n\r\n")
	h, _, err := parseReq(buf, bigLimit)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Host", "a b", "X-Empty", "", "x-tab", "v", "X-Obs", "\xff"}
	var got []string
	for _, f := range h.Fields {
		got = append(got, string(f.Name), string(f.Value))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("fields %q; want %q", got, want)
	}
	for _, f := range h.Fields {
		if !within(buf, f.Name) || !within(buf, f.Value) {
			t.Errorf("field %q: %q does not view the buffer", f.Name, f.Value)
		}
	}
}

func TestParseRequestResets(t *testing.T) {
	var arr [MaxFields]Field
	h := &Request{Fields: arr[:0]}
	first := "POST /a?b HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n"
	if _, err := ParseRequest([]byte(first), h, bigLimit); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseRequest([]byte("GET / HTTP/1.1\r\n\r\n"), h, bigLimit); err != nil {
		t.Fatal(err)
	}
	if got, want := reqString(h), "GET / path=/ 1.1 hdrs=0"; got != want {
		t.Errorf("after reuse got %s; want %s", got, want)
	}
	if cap(h.Fields) != MaxFields || &h.Fields[:1][0] != &arr[0] {
		t.Errorf("ParseRequest replaced the caller's header array")
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
		{"one byte short", head, len(head) - 1, 0, ErrHeaderTooLarge},
		{"incomplete below limit", head[:10], 11, 0, nil},
		{"incomplete at limit", head[:10], 10, 0, ErrHeaderTooLarge},
		{"incomplete over limit", head[:len(head)-1] + "xxxx", len(head), 0, ErrHeaderTooLarge},
		{"zero limit", head, 0, 0, ErrHeaderTooLarge},
		{"negative limit", head, -1, 0, ErrHeaderTooLarge},
		{"empty buffer", "", 10, 0, nil},
		{"65 fields", "GET / HTTP/1.1\r\n" + fieldLines(65) + "\r\n", bigLimit, 0, ErrHeaderTooLarge},
		{"65 fields, head unfinished", "GET / HTTP/1.1\r\n" + fieldLines(65), bigLimit, 0, ErrHeaderTooLarge},
		{"too many empty lines", "\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n", bigLimit, 0, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, n, err := parseReq([]byte(tc.buf), tc.maxBytes)
			if n != tc.n || err != tc.err {
				t.Errorf("ParseRequest = %d, %v; want %d, %v", n, err, tc.n, tc.err)
			}
		})
	}
}

// badRequests are request heads that are ErrMalformed. Some lack the final
// empty line: errors are found as soon as a line is whole.
var badRequests = []struct{ name, buf string }{
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
	for _, tc := range badRequests {
		t.Run(tc.name, func(t *testing.T) {
			if _, n, err := parseReq([]byte(tc.buf), bigLimit); n != 0 || err != ErrMalformed {
				t.Errorf("ParseRequest(%.60q) = %d, %v; want 0, ErrMalformed", tc.buf, n, err)
			}
		})
	}
}

func TestParseRequestDoesNotAllocate(t *testing.T) {
	buf := []byte(typicalRequest)
	var arr [MaxFields]Field
	var h Request
	allocs := testing.AllocsPerRun(1000, func() {
		h.Fields = arr[:0]
		if n, err := ParseRequest(buf, &h, 8192); n != len(buf) || err != nil {
			t.Fatalf("ParseRequest = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("ParseRequest allocates %v times per run; want 0", allocs)
	}
	resp := []byte(typicalResponse)
	var rh Response
	allocs = testing.AllocsPerRun(1000, func() {
		rh.Fields = arr[:0]
		if n, err := ParseResponse(resp, &rh, 8192); n != len(resp) || err != nil {
			t.Fatalf("ParseResponse = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("ParseResponse allocates %v times per run; want 0", allocs)
	}
}

func TestParseResponse(t *testing.T) {
	for _, tc := range []struct {
		name, head, tail, want string
	}{
		{"typical", typicalResponse, "", "200 1.1 cl=1234 hdrs=6"},
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
		{"64 fields", "HTTP/1.1 200 OK\r\n" + fieldLines(64) + "\r\n", "", "200 1.1 hdrs=64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := []byte(tc.head + tc.tail)
			h, n, err := parseResp(buf, bigLimit)
			if err != nil || n != len(tc.head) {
				t.Fatalf("ParseResponse = %d, %v; want %d, nil", n, err, len(tc.head))
			}
			if got := respString(h); got != tc.want {
				t.Errorf("got %s; want %s", got, tc.want)
			}
			for k := range n {
				if _, n, err := parseResp(buf[:k], bigLimit); n != 0 || err != nil {
					t.Fatalf("prefix %d: ParseResponse = %d, %v; want 0, nil", k, n, err)
				}
			}
			if _, m, err := parseResp(buf, n-1); m != 0 || err != ErrHeaderTooLarge {
				t.Errorf("maxBytes %d: ParseResponse = %d, %v; want 0, ErrHeaderTooLarge", n-1, m, err)
			}
		})
	}
}

func TestParseResponseMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, buf string
		err       error
	}{
		{"status 099", "HTTP/1.1 099 X\r\n\r\n", ErrMalformed},
		{"status 000", "HTTP/1.1 000 X\r\n\r\n", ErrMalformed},
		{"two digits", "HTTP/1.1 20 OK\r\n\r\n", ErrMalformed},
		{"four digits", "HTTP/1.1 2000 OK\r\n\r\n", ErrMalformed},
		{"letters", "HTTP/1.1 2x0 OK\r\n\r\n", ErrMalformed},
		{"no space before reason", "HTTP/1.1 200OK\r\n\r\n", ErrMalformed},
		{"two spaces", "HTTP/1.1  200 OK\r\n\r\n", ErrMalformed},
		{"no status", "HTTP/1.1\r\n\r\n", ErrMalformed},
		{"HTTP/1.2", "HTTP/1.2 200 OK\r\n\r\n", ErrMalformed},
		{"HTTP/2", "HTTP/2 200 OK\r\n\r\n", ErrMalformed},
		{"lower-case", "http/1.1 200 OK\r\n\r\n", ErrMalformed},
		{"NUL in reason", "HTTP/1.1 200 O\x00K\r\n\r\n", ErrMalformed},
		{"bare CR in reason", "HTTP/1.1 200 OK\rX: y\r\n\r\n", ErrMalformed},
		{"leading empty line", "\r\nHTTP/1.1 200 OK\r\n\r\n", ErrMalformed},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\n", ErrMalformed},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", ErrMalformed},
		{"control in value", "HTTP/1.1 200 OK\r\nX: \x01\r\n\r\n", ErrMalformed},
		{"bad content-length", "HTTP/1.1 200 OK\r\nContent-Length: 1.0\r\n\r\n", ErrMalformed},
		{"different content-lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", ErrMalformed},
		{"gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", ErrMalformed},
		{"chunked twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", ErrMalformed},
		{"chunked and content-length", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", ErrMalformed},
		{"content-length and chunked", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", ErrMalformed},
		{"chunked in HTTP/1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", ErrMalformed},
		{"65 fields", "HTTP/1.1 200 OK\r\n" + fieldLines(65) + "\r\n", ErrHeaderTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, n, err := parseResp([]byte(tc.buf), bigLimit); n != 0 || err != tc.err {
				t.Errorf("ParseResponse(%q) = %d, %v; want 0, %v", tc.buf, n, err, tc.err)
			}
		})
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
		if got := HasToken([]byte(tc.v), tc.tok); got != tc.want {
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
		if got := EqualFold([]byte(tc.b), tc.s); got != tc.want {
			t.Errorf("equalFold(%q, %q) = %v; want %v", tc.b, tc.s, got, tc.want)
		}
	}
}

// within reports whether s is nil or lies within buf's bytes.
func within(buf, s []byte) bool {
	if s == nil {
		return true
	}
	b := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return p >= b && p+uintptr(len(s)) <= b+uintptr(len(buf))
}

// cleanEnds reports whether every CR in head is followed by LF and head has no NUL.
func cleanEnds(head []byte) bool {
	for i, c := range head {
		if c == 0 || c == '\r' && (i+1 == len(head) || head[i+1] != '\n') {
			return false
		}
	}
	return true
}

// fuzzLimit turns a fuzzed number into a maxBytes or max of 1 to 65536.
func fuzzLimit(m uint16) int { return int(m) + 1 }

func FuzzParseRequest(f *testing.F) {
	for _, tc := range validRequests {
		if len(tc.head) < 1000 {
			f.Add([]byte(tc.head+tc.tail), uint16(4096))
		}
	}
	for _, tc := range badRequests {
		if len(tc.buf) < 1000 {
			f.Add([]byte(tc.buf), uint16(4096))
		}
	}
	f.Add([]byte(typicalRequest), uint16(100))
	f.Fuzz(func(t *testing.T, buf []byte, m uint16) {
		maxBytes := fuzzLimit(m)
		h, n, err := parseReq(buf, maxBytes)
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
		for _, s := range [][]byte{h.Method, h.Target, h.Path, h.Query, h.Host} {
			if !within(buf[:n], s) {
				t.Fatalf("%q is not within the head", s)
			}
		}
		for _, f := range h.Fields {
			if !within(buf[:n], f.Name) || !within(buf[:n], f.Value) {
				t.Fatalf("field %q: %q is not within the head", f.Name, f.Value)
			}
		}
		if len(h.Fields) > MaxFields || h.Minor > 1 || len(h.Method) == 0 || len(h.Method) > maxMethod ||
			len(h.Path) == 0 || h.Chunked && h.ContentLength >= 0 || h.Chunked && h.Minor == 0 ||
			h.KeepAlive10 && (h.Close || h.Minor != 0) || !cleanEnds(buf[:n]) ||
			!bytes.HasSuffix(buf[:n], []byte("\n\n")) && !bytes.HasSuffix(buf[:n], []byte("\n\r\n")) {
			t.Fatalf("accepted %q as %s", buf[:n], reqString(h))
		}
		want := reqString(h)
		h2, n2, err := parseReq(buf[:n], maxBytes)
		if n2 != n || err != nil || reqString(h2) != want {
			t.Fatalf("parsing buf[:n] = %d, %v, %s; want %d, nil, %s", n2, err, reqString(h2), n, want)
		}
		if _, n2, err := parseReq(buf[:n-1], maxBytes); n2 != 0 || err != nil {
			t.Fatalf("parsing buf[:n-1] = %d, %v; want 0, nil", n2, err)
		}
		compareRequest(t, buf[:n], h)
	})
}

// compareRequest checks that, when net/http also accepts head, the two
// agree on the message's framing and routing.
func compareRequest(t *testing.T, head []byte, h *Request) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return // stricter or different rules (leading empty lines, URL syntax, Host syntax)
	}
	cl := h.ContentLength
	switch {
	case h.Chunked:
		cl = -1
	case cl < 0:
		cl = 0
	}
	te := fmt.Sprint(req.TransferEncoding)
	if req.Method != string(h.Method) || req.RequestURI != string(h.Target) || req.ProtoMinor != h.Minor ||
		req.ContentLength != cl || (te == "[chunked]") != h.Chunked || req.Close != h.Close {
		t.Fatalf("net/http reads %q as %s %s 1.%d cl=%d te=%s close=%v; we as %s",
			head, req.Method, req.RequestURI, req.ProtoMinor, req.ContentLength, te, req.Close, reqString(h))
	}
	if h.Target[0] == '/' && req.Host != string(h.Host) {
		t.Fatalf("net/http reads host %q, we %q", req.Host, h.Host)
	}
}

func FuzzParseResponse(f *testing.F) {
	f.Add([]byte(typicalResponse), uint16(4096))
	f.Add([]byte("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"), uint16(4096))
	f.Add([]byte("HTTP/1.1 204\nContent-Length: 0, 0\nX:\n\n"), uint16(4096))
	f.Add([]byte("HTTP/1.1 99 X\r\nA : b\r\n c\r\n\r\n"), uint16(20))
	f.Fuzz(func(t *testing.T, buf []byte, m uint16) {
		maxBytes := fuzzLimit(m)
		h, n, err := parseResp(buf, maxBytes)
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
		for _, f := range h.Fields {
			if !within(buf[:n], f.Name) || !within(buf[:n], f.Value) {
				t.Fatalf("field %q: %q is not within the head", f.Name, f.Value)
			}
		}
		if len(h.Fields) > MaxFields || h.Minor > 1 || h.Status < 100 || h.Status > 999 ||
			h.Chunked && h.ContentLength >= 0 || h.Chunked && h.Minor == 0 || !cleanEnds(buf[:n]) {
			t.Fatalf("accepted %q as %s", buf[:n], respString(h))
		}
		want := respString(h)
		h2, n2, err := parseResp(buf[:n], maxBytes)
		if n2 != n || err != nil || respString(h2) != want {
			t.Fatalf("parsing buf[:n] = %d, %v, %s; want %d, nil, %s", n2, err, respString(h2), n, want)
		}
		if _, n2, err := parseResp(buf[:n-1], maxBytes); n2 != 0 || err != nil {
			t.Fatalf("parsing buf[:n-1] = %d, %v; want 0, nil", n2, err)
		}
		compareResponse(t, buf[:n], h)
	})
}

// compareResponse checks that, when net/http also accepts head, the two
// agree on the framing of a response that may have a body.
func compareResponse(t *testing.T, head []byte, h *Response) {
	if h.Status < 200 || h.Status == 204 || h.Status == 304 {
		return // net/http knows these have no body
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), nil)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	te := fmt.Sprint(resp.TransferEncoding)
	if resp.StatusCode != h.Status || resp.ProtoMinor != h.Minor ||
		(te == "[chunked]") != h.Chunked || !h.Chunked && resp.ContentLength != h.ContentLength ||
		(h.Chunked || h.ContentLength >= 0) && resp.Close != h.Close {
		t.Fatalf("net/http reads %q as %d 1.%d cl=%d te=%s close=%v; we as %s",
			head, resp.StatusCode, resp.ProtoMinor, resp.ContentLength, te, resp.Close, respString(h))
	}
}

func BenchmarkParseRequest(b *testing.B) {
	buf := []byte(typicalRequest)
	var arr [MaxFields]Field
	var h Request
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		h.Fields = arr[:0]
		if _, err := ParseRequest(buf, &h, 8192); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseResponse(b *testing.B) {
	buf := []byte(typicalResponse)
	var arr [MaxFields]Field
	var h Response
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		h.Fields = arr[:0]
		if _, err := ParseResponse(buf, &h, 8192); err != nil {
			b.Fatal(err)
		}
	}
}
