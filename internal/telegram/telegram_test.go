package telegram

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/cellkit/cellkit/internal/wire"
)

var profiles = []Profile{NICE(), KCB()}

// messages are one of each type, as the client and the simulator send them.
var messages = []Message{
	{Type: Request, TraceNo: 1, UserKey: "user-0001", RespCode: CodeOK},
	{Type: Response, TraceNo: 999999999999, UserKey: "user-0001", RespCode: CodeOK, Score: 9999, Text: "정상 처리되었습니다"},
	{Type: Response, TraceNo: 42, UserKey: "~!@#$%^&*()_+{}|:<>?", RespCode: "9001", Score: 0, Text: "조회 실패: 잠시 후 다시 시도하세요"},
	{Type: Heartbeat, TraceNo: 7, RespCode: CodeOK},
	{Type: HeartbeatAck, TraceNo: 7, RespCode: CodeOK},
	{Type: Response, TraceNo: 3, UserKey: " leading space", RespCode: "0100", Score: 512, Text: "plain ASCII text of exactly forty bytes!"},
}

func TestProfileByName(t *testing.T) {
	for _, name := range []string{"nice", "kcb"} {
		p, err := ProfileByName(name)
		if err != nil || p.Name != name {
			t.Errorf("ProfileByName(%q) = %q, %v; want the %s profile", name, p.Name, err, name)
		}
	}
	for _, name := range []string{"", "NICE", "kcb ", "other"} {
		if _, err := ProfileByName(name); err == nil {
			t.Errorf("ProfileByName(%q) = nil error, want one", name)
		}
	}
}

func TestProfileFraming(t *testing.T) {
	for _, p := range profiles {
		if err := p.Framing.Validate(); err != nil {
			t.Errorf("%s: Framing.Validate() = %v", p.Name, err)
		}
	}
	if n := NICE().Framing; n.Kind != wire.LengthPrefixed || n.HeaderWidth != 4 || n.MaxBody != 512 || niceBodyWidth > n.MaxBody {
		t.Errorf("NICE().Framing = %+v, want a 4-digit header, 512-byte maximum", n)
	}
	if k := KCB().Framing; k.Kind != wire.Fixed || k.MaxBody != 200 || kcbBodyWidth > k.MaxBody {
		t.Errorf("KCB().Framing = %+v, want fixed 200-byte frames", k)
	}
}

// The bytes on the wire, so the simulator and the client agree with a spec
// and not only with each other.
func TestAppendFrameGolden(t *testing.T) {
	m := Message{Type: Response, TraceNo: 42, UserKey: "user-1", RespCode: CodeOK, Score: 815, Text: "정상"}
	fields := "0210" + "000000000042" + "user-1              " + "0000" + "0815" + "\xc1\xa4\xbb\xf3" + strings.Repeat(" ", 36)
	tests := []struct {
		p    Profile
		want string
	}{
		{NICE(), "0084" + fields},
		{KCB(), "KCB00001" + fields + strings.Repeat(" ", 108)},
	}
	for _, tt := range tests {
		got, err := tt.p.AppendFrame([]byte("prev"), &m)
		if err != nil {
			t.Fatalf("%s: AppendFrame(%+v) = %v", tt.p.Name, m, err)
		}
		if string(got) != "prev"+tt.want {
			t.Errorf("%s: AppendFrame(%+v) =\n%q\nwant\n%q", tt.p.Name, m, got, "prev"+tt.want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.Name, func(t *testing.T) {
			// All messages into one buffer, as a session writes them, then
			// read back with the profile's own reader.
			var stream bytes.Buffer
			var frame []byte
			for _, m := range messages {
				var err error
				if frame, err = p.AppendFrame(frame[:0], &m); err != nil {
					t.Fatalf("AppendFrame(%+v) = %v", m, err)
				}
				stream.Write(frame)
			}
			r := p.NewReader(&stream)
			for _, want := range messages {
				body, err := r.ReadFrame()
				if err != nil {
					t.Fatalf("ReadFrame() = %v, want the frame of %+v", err, want)
				}
				var got Message
				if err := p.Decode(body, &got); err != nil {
					t.Fatalf("Decode(%q) = %v", body, err)
				}
				if got != want {
					t.Errorf("Decode(AppendFrame(%+v)) = %+v", want, got)
				}
			}
			if _, err := r.ReadFrame(); err != io.EOF {
				t.Errorf("ReadFrame() after the last frame = %v, want io.EOF", err)
			}
		})
	}
}

// decodeFrame encodes m with p and decodes it back.
func decodeFrame(t *testing.T, p Profile, m Message) Message {
	t.Helper()
	frame, err := p.AppendFrame(nil, &m)
	if err != nil {
		t.Fatalf("%s: AppendFrame(%+v) = %v", p.Name, m, err)
	}
	body, err := p.NewReader(bytes.NewReader(frame)).ReadFrame()
	if err != nil {
		t.Fatalf("%s: ReadFrame() = %v", p.Name, err)
	}
	var got Message
	if err := p.Decode(body, &got); err != nil {
		t.Fatalf("%s: Decode(%q) = %v", p.Name, body, err)
	}
	return got
}

func TestNormalisation(t *testing.T) {
	tests := []struct {
		name   string
		in     Message
		change func(*Message)
	}{
		{"Korean text longer than 40 bytes is cut between characters",
			Message{Type: Response, RespCode: CodeOK, Text: strings.Repeat("가", 25)},
			func(m *Message) { m.Text = strings.Repeat("가", 20) }},
		{"odd cut: the character across byte 40 is dropped",
			Message{Type: Response, RespCode: CodeOK, Text: "a" + strings.Repeat("가", 25)},
			func(m *Message) { m.Text = "a" + strings.Repeat("가", 19) }},
		{"ASCII text cut at 40 bytes",
			Message{Type: Response, RespCode: CodeOK, Text: strings.Repeat("x", 41)},
			func(m *Message) { m.Text = strings.Repeat("x", 40) }},
		{"trailing spaces are padding",
			Message{Type: Request, RespCode: CodeOK, UserKey: "key  ", Text: "정상  "},
			func(m *Message) { m.UserKey, m.Text = "key", "정상" }},
		{"an empty response code is sent as 0000",
			Message{Type: Request, TraceNo: 5, UserKey: "k"},
			func(m *Message) { m.RespCode = CodeOK }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.in
			tt.change(&want)
			for _, p := range profiles {
				if got := decodeFrame(t, p, tt.in); got != want {
					t.Errorf("%s: Decode(AppendFrame(%+v)) = %+v, want %+v", p.Name, tt.in, got, want)
				}
			}
		})
	}
}

func TestAppendFrameErrors(t *testing.T) {
	ok := Message{Type: Request, TraceNo: 1, UserKey: "u", RespCode: CodeOK}
	tests := []struct {
		name   string
		change func(*Message)
		field  string
		detail string
	}{
		{"trace number of 13 digits", func(m *Message) { m.TraceNo = 1_000_000_000_000 }, "TraceNo", "does not fit in 12 digits"},
		{"user key of 21 bytes", func(m *Message) { m.UserKey = strings.Repeat("k", 21) }, "UserKey", "longer than 20 bytes"},
		{"user key not ASCII", func(m *Message) { m.UserKey = "사용자" }, "UserKey", "not printable ASCII"},
		{"user key with a control character", func(m *Message) { m.UserKey = "a\x00b" }, "UserKey", "not printable ASCII"},
		{"score 10000", func(m *Message) { m.Score = 10000 }, "Score", "does not fit in 4 digits"},
		{"negative score", func(m *Message) { m.Score = -1 }, "Score", "negative"},
		{"empty type", func(m *Message) { m.Type = "" }, "Type", "unknown message type"},
		{"unknown type", func(m *Message) { m.Type = "0300" }, "Type", `unknown message type "0300"`},
		{"short response code", func(m *Message) { m.RespCode = "12" }, "RespCode", "not 4 digits"},
		{"letters in response code", func(m *Message) { m.RespCode = "E001" }, "RespCode", "not 4 digits"},
		{"text not in EUC-KR", func(m *Message) { m.Text = "OK 👍" }, "Text", "cannot be encoded in EUC-KR"},
		{"text with a newline", func(m *Message) { m.Text = "line\nbreak" }, "Text", "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ok
			tt.change(&m)
			for _, p := range profiles {
				got, err := p.AppendFrame([]byte("prev"), &m)
				wantFieldError(t, p.Name+": AppendFrame", err, tt.field, tt.detail)
				if string(got) != "prev" {
					t.Errorf("%s: AppendFrame changed dst to %q on error", p.Name, got)
				}
			}
		})
	}
	var zero Profile
	if _, err := zero.AppendFrame(nil, &ok); err == nil {
		t.Error("zero Profile: AppendFrame = nil error, want one")
	}
	if err := zero.Decode(make([]byte, niceBodyWidth), &ok); err == nil {
		t.Error("zero Profile: Decode = nil error, want one")
	}
}

// validBody returns the body of a valid frame of p, as ReadFrame returns it.
func validBody(t testing.TB, p Profile) []byte {
	t.Helper()
	m := Message{Type: Response, TraceNo: 42, UserKey: "user-1", RespCode: CodeOK, Score: 815, Text: "정상"}
	frame, err := p.AppendFrame(nil, &m)
	if err != nil {
		t.Fatal(err)
	}
	body, err := p.NewReader(bytes.NewReader(frame)).ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(body)
}

func TestDecodeErrors(t *testing.T) {
	// Offsets of the message fields in a NICE body; KCB has 8 bytes before.
	const (
		offType     = 0
		offTraceNo  = 4
		offUserKey  = 16
		offRespCode = 36
		offScore    = 40
		offText     = 44
	)
	tests := []struct {
		name   string
		off    int
		put    string
		field  string
		detail string
	}{
		{"unknown type", offType, "0300", "Type", `unknown message type "0300"`},
		{"type not digits", offType, "02A0", "Type", "not all digits"},
		{"letter in trace number", offTraceNo, "x", "TraceNo", "not all digits"},
		{"control in user key", offUserKey, "\x01", "UserKey", "not printable ASCII"},
		{"EUC-KR in user key", offUserKey, "\xb0\xa1", "UserKey", "not printable ASCII"},
		{"space in response code", offRespCode, " 000", "RespCode", "not all digits"},
		{"letter in score", offScore, "12a4", "Score", "not all digits"},
		{"invalid EUC-KR in text", offText, "\xff\xff", "Text", "not valid EUC-KR"},
		{"split character at the end of text", offText + 39, "\xb0", "Text", "not valid EUC-KR"},
		{"control in text", offText, "\x1b[0m", "Text", "control character"},
	}
	for _, p := range profiles {
		base := 0
		if p.variant == variantKCB {
			base = 8
		}
		for _, tt := range tests {
			t.Run(p.Name+"/"+tt.name, func(t *testing.T) {
				body := validBody(t, p)
				copy(body[base+tt.off:], tt.put)
				before := Message{TraceNo: 1}
				m := before
				wantFieldError(t, "Decode", p.Decode(body, &m), tt.field, tt.detail)
				if m != before {
					t.Errorf("Decode changed m to %+v on error", m)
				}
			})
		}
	}

	var m Message
	nice := validBody(t, NICE())
	for _, body := range [][]byte{nil, nice[:83], append(bytes.Clone(nice), ' ')} {
		if err := NICE().Decode(body, &m); err == nil || !strings.Contains(err.Error(), "want 84") {
			t.Errorf("nice: Decode(%d bytes) = %v, want a length error", len(body), err)
		}
	}
	kcb := validBody(t, KCB())
	if err := KCB().Decode(kcb[:199], &m); err == nil || !strings.Contains(err.Error(), "want 200") {
		t.Errorf("kcb: Decode(199 bytes) = %v, want a length error", err)
	}
	for _, tt := range []struct {
		off          int
		put          string
		field, value string
	}{
		{0, "KCB00002", "Institution", `"KCB00002", want "KCB00001"`},
		{0, "        ", "Institution", `"", want "KCB00001"`},
		{92, "x", "Filler", `byte 92 is 'x'`},
		{199, "\x00", "Filler", `byte 199 is '\x00'`},
	} {
		body := bytes.Clone(kcb)
		copy(body[tt.off:], tt.put)
		wantFieldError(t, "kcb: Decode", KCB().Decode(body, &m), tt.field, tt.value)
	}
}

// A NICE header that is not digits or says more than 512 bytes closes the
// session: the reader reports ErrMalformedFrame.
func TestNICEReaderRejectsBadHeaders(t *testing.T) {
	for _, stream := range []string{"08x4", "0513" + strings.Repeat(" ", 513), "9999"} {
		_, err := NICE().NewReader(strings.NewReader(stream)).ReadFrame()
		if !errors.Is(err, wire.ErrMalformedFrame) {
			t.Errorf("ReadFrame(%.8q) = %v, want ErrMalformedFrame", stream, err)
		}
	}
}

func TestAppendFrameAllocs(t *testing.T) {
	m := messages[1]
	for _, p := range profiles {
		buf := make([]byte, 0, 512)
		allocs := testing.AllocsPerRun(100, func() {
			var err error
			if buf, err = p.AppendFrame(buf[:0], &m); err != nil {
				t.Fatal(err)
			}
		})
		// The body struct handed to Marshal escapes; nothing else allocates.
		if allocs > 1 {
			t.Errorf("%s: AppendFrame allocates %v times, want at most 1", p.Name, allocs)
		}
	}
}

func fuzzDecode(f *testing.F, p Profile) {
	for _, m := range messages {
		frame, err := p.AppendFrame(nil, &m)
		if err != nil {
			f.Fatal(err)
		}
		body, err := p.NewReader(bytes.NewReader(frame)).ReadFrame()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Clone(body))
	}
	f.Add([]byte("0200"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var m Message
		if err := p.Decode(body, &m); err != nil {
			return
		}
		frame, err := p.AppendFrame(nil, &m)
		if err != nil {
			t.Fatalf("Decode(%q) = %+v, which AppendFrame rejects: %v", body, m, err)
		}
		again, err := p.NewReader(bytes.NewReader(frame)).ReadFrame()
		if err != nil {
			t.Fatalf("ReadFrame(AppendFrame(%+v)) = %v", m, err)
		}
		var back Message
		if err := p.Decode(again, &back); err != nil {
			t.Fatalf("Decode(AppendFrame(%+v)) = %v", m, err)
		}
		if back != m {
			t.Fatalf("Decode(%q) = %+v, but its frame decodes to %+v", body, m, back)
		}
		if !bytes.Equal(again, body) {
			t.Fatalf("Decode accepted %q, which encodes back as %q", body, again)
		}
	})
}

func FuzzDecodeNICE(f *testing.F) { fuzzDecode(f, NICE()) }

func FuzzDecodeKCB(f *testing.F) { fuzzDecode(f, KCB()) }

// Profiles share cached plans and EUC-KR transformers across goroutines; run
// under -race.
func TestConcurrentUse(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		p := profiles[g%len(profiles)]
		wg.Go(func() {
			var buf []byte
			for i := range 200 {
				want := messages[i%len(messages)]
				var err error
				if buf, err = p.AppendFrame(buf[:0], &want); err != nil {
					t.Errorf("%s: AppendFrame(%+v) = %v", p.Name, want, err)
					return
				}
				body, err := p.NewReader(bytes.NewReader(buf)).ReadFrame()
				if err != nil {
					t.Errorf("%s: ReadFrame() = %v", p.Name, err)
					return
				}
				var got Message
				if err := p.Decode(body, &got); err != nil || got != want {
					t.Errorf("%s: Decode = %+v, %v; want %+v", p.Name, got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
