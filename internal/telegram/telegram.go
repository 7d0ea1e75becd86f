// Package telegram encodes the fixed-width telegrams that the credit agencies
// speak, and frames them the way each agency does: NICE with a 4-digit length
// header, KCB in fixed 200-byte frames.
//
// It has two layers. Marshal, Unmarshal and Layout are a codec driven by
// struct tags, `tg:"WIDTH,KIND[,trunc]"` (`tg:"-"` skips a field; every other
// field needs a tag):
//
//   - n: an integer type or a digit string, right-aligned and zero-padded;
//     decoding needs all digits. The width must fit the integer type.
//   - an: a string of printable ASCII, left-aligned and space-padded; trailing
//     spaces are padding and dropped on decode.
//   - text: a string sent in EUC-KR, otherwise like an; control characters are
//     refused both ways. A text too long for its field is an error, or, with
//     trunc, cut after the last whole character that fits.
//
// Message and Profile use the codec for the agency telegrams; the agency
// simulator and the agency client build on them.
//
// Guarantees: every value goes in exactly its field's width, or is an error
// (a *FieldError naming the field); only text fields tagged trunc are cut, and
// never inside a two-byte EUC-KR character. Decoding checks every field,
// never panics on arbitrary bytes, and accepts only what encoding can send
// again: for each Message that Decode returns, AppendFrame builds a frame
// that decodes to the same Message.
package telegram

import (
	"errors"
	"fmt"
	"io"

	"github.com/cellkit/cellkit/internal/wire"
)

// Type is a telegram's message type, its first field.
type Type string

// The message types of both profiles.
const (
	Request      Type = "0200"
	Response     Type = "0210"
	Heartbeat    Type = "0800"
	HeartbeatAck Type = "0810"
)

// CodeOK is the response code of a call that succeeded.
const CodeOK = "0000"

func (t Type) known() bool {
	switch t {
	case Request, Response, Heartbeat, HeartbeatAck:
		return true
	}
	return false
}

// Message is one telegram, independent of the profile.
//
// AppendFrame followed by Decode returns the same Message except that Text is
// cut to 40 bytes of EUC-KR at a character boundary, trailing spaces of
// UserKey and Text are padding and so dropped, and an empty RespCode is sent
// as CodeOK.
type Message struct {
	Type     Type
	TraceNo  uint64 // at most 12 digits
	UserKey  string // at most 20 bytes of printable ASCII
	RespCode string // 4 digits, CodeOK when the call succeeded
	Score    int    // 0..9999
	Text     string // message text, at most 40 bytes in EUC-KR (cut at a character boundary)
}

// niceBody is the NICE telegram: the message fields and nothing else.
type niceBody struct {
	Type     Type   `tg:"4,n"`
	TraceNo  uint64 `tg:"12,n"`
	UserKey  string `tg:"20,an"`
	RespCode string `tg:"4,n"`
	Score    int    `tg:"4,n"`
	Text     string `tg:"40,text,trunc"`
}

// kcbBody is the KCB telegram: our institution code, then the message
// fields; the fixed framing pads it with spaces to the frame size.
type kcbBody struct {
	Institution string `tg:"8,an"`
	Type        Type   `tg:"4,n"`
	TraceNo     uint64 `tg:"12,n"`
	UserKey     string `tg:"20,an"`
	RespCode    string `tg:"4,n"`
	Score       int    `tg:"4,n"`
	Text        string `tg:"40,text,trunc"`
}

const (
	niceBodyWidth  = 84  // Layout(niceBody{}), checked by a test
	niceMaxBody    = 512 // the header could say 9999; we never read that far
	kcbBodyWidth   = 92  // Layout(kcbBody{}), checked by a test
	kcbFrameSize   = 200
	kcbInstitution = "KCB00001"
)

type variant uint8

const (
	variantNICE variant = iota + 1
	variantKCB
)

// Profile is one agency's framing and layout. Use NICE, KCB or ProfileByName;
// the zero Profile encodes and decodes nothing.
type Profile struct {
	Name    string       // "nice" or "kcb"
	Framing wire.Framing // NICE: length-prefixed, 4-digit header; KCB: fixed 200-byte frames
	variant variant
}

// NICE is the NICE profile: a 4-digit ASCII length header, bodies of at most
// 512 bytes on read, and an 84-byte body.
func NICE() Profile {
	return Profile{
		Name:    "nice",
		Framing: wire.Framing{Kind: wire.LengthPrefixed, HeaderWidth: 4, MaxBody: niceMaxBody},
		variant: variantNICE,
	}
}

// KCB is the KCB profile: fixed 200-byte frames holding the institution code
// KCB00001, the message fields and space filler.
func KCB() Profile {
	return Profile{
		Name:    "kcb",
		Framing: wire.Framing{Kind: wire.Fixed, MaxBody: kcbFrameSize},
		variant: variantKCB,
	}
}

// ProfileByName returns the profile called "nice" or "kcb".
func ProfileByName(name string) (Profile, error) {
	switch name {
	case "nice":
		return NICE(), nil
	case "kcb":
		return KCB(), nil
	}
	return Profile{}, fmt.Errorf("telegram: unknown profile %q (want nice or kcb)", name)
}

var errZeroProfile = errors.New("telegram: zero Profile (use NICE, KCB or ProfileByName)")

// AppendFrame appends m as one frame, header or filler included, ready to
// write. An invalid field is a *FieldError naming it; dst is then returned
// unchanged.
func (p Profile) AppendFrame(dst []byte, m *Message) ([]byte, error) {
	if !m.Type.known() {
		return dst, &FieldError{Field: "Type", Err: fmt.Errorf("unknown message type %q", m.Type)}
	}
	if m.RespCode != "" && (len(m.RespCode) != 4 || !allDigits(m.RespCode)) {
		return dst, &FieldError{Field: "RespCode", Err: fmt.Errorf("%q is not 4 digits", m.RespCode)}
	}
	start := len(dst)
	var err error
	switch p.variant {
	case variantNICE:
		dst, err = Marshal(dst, &niceBody{
			Type: m.Type, TraceNo: m.TraceNo, UserKey: m.UserKey,
			RespCode: m.RespCode, Score: m.Score, Text: m.Text,
		})
	case variantKCB:
		dst, err = Marshal(dst, &kcbBody{
			Institution: kcbInstitution,
			Type:        m.Type, TraceNo: m.TraceNo, UserKey: m.UserKey,
			RespCode: m.RespCode, Score: m.Score, Text: m.Text,
		})
	default:
		return dst, errZeroProfile
	}
	if err != nil {
		return dst, err
	}
	// Frame the body that now ends dst, then move the frame down over it:
	// no buffer of our own, so a caller reusing dst allocates nothing here.
	body := dst[start:]
	framed, err := p.Framing.Append(dst, body)
	if err != nil {
		return dst[:start], err
	}
	n := copy(framed[start:], framed[len(dst):])
	return framed[:start+n], nil
}

// NewReader returns a frame reader over r with p's framing. Its bodies go to
// Decode.
func (p Profile) NewReader(r io.Reader) *wire.Reader {
	return wire.NewReader(r, p.Framing)
}

// Decode decodes a body, as ReadFrame returns it, into m. It checks every
// field (an invalid one is a *FieldError naming it) and, for KCB, the
// institution code and that the filler is spaces. On error m is unchanged.
func (p Profile) Decode(body []byte, m *Message) error {
	var msg Message
	switch p.variant {
	case variantNICE:
		if len(body) != niceBodyWidth {
			return fmt.Errorf("telegram: nice body of %d bytes, want %d", len(body), niceBodyWidth)
		}
		var b niceBody
		if err := Unmarshal(body, &b); err != nil {
			return err
		}
		msg = Message(b)
	case variantKCB:
		if len(body) != kcbFrameSize {
			return fmt.Errorf("telegram: kcb frame of %d bytes, want %d", len(body), kcbFrameSize)
		}
		for i, c := range body[kcbBodyWidth:] {
			if c != ' ' {
				return &FieldError{Field: "Filler", Err: fmt.Errorf("byte %d is %q, not a space", kcbBodyWidth+i, c)}
			}
		}
		var b kcbBody
		if err := Unmarshal(body[:kcbBodyWidth], &b); err != nil {
			return err
		}
		if b.Institution != kcbInstitution {
			return &FieldError{Field: "Institution", Err: fmt.Errorf("%q, want %q", b.Institution, kcbInstitution)}
		}
		msg = Message{Type: b.Type, TraceNo: b.TraceNo, UserKey: b.UserKey, RespCode: b.RespCode, Score: b.Score, Text: b.Text}
	default:
		return errZeroProfile
	}
	if !msg.Type.known() {
		return &FieldError{Field: "Type", Err: fmt.Errorf("unknown message type %q", msg.Type)}
	}
	*m = msg
	return nil
}
