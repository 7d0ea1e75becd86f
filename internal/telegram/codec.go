package telegram

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/encoding/korean"
	"golang.org/x/text/transform"
)

// FieldError reports a value that does not fit its field on encode, or bytes
// that are not a valid value for it on decode.
type FieldError struct {
	Field string // the Go name of the struct field
	Err   error
}

func (e *FieldError) Error() string { return "telegram: field " + e.Field + ": " + e.Err.Error() }

func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(f *field, format string, args ...any) error {
	return &FieldError{Field: f.name, Err: fmt.Errorf(format, args...)}
}

// maxFieldWidth bounds a field's width; telegrams are small.
const maxFieldWidth = 4096

type kind uint8

const (
	numeric kind = iota + 1 // "n": digits, right-aligned, zero-padded
	alnum                   // "an": printable ASCII, left-aligned, space-padded
	text                    // "text": EUC-KR, left-aligned, space-padded
)

// field is one tagged struct field of a layout.
type field struct {
	name   string
	index  int
	offset int
	width  int
	kind   kind
	trunc  bool         // text only: cut at a character boundary instead of failing
	goKind reflect.Kind // reflect.String or an integer kind
	max    uint64       // numeric integers: the largest value width digits hold
}

// plan is the parsed layout of one struct type.
type plan struct {
	fields []field
	width  int
	err    error
}

// plans caches a *plan per struct type, as encoding/json caches its encoders:
// tags are parsed once per type, not once per call.
var plans sync.Map

// euckr's transformers are stateless (transform.NopResetter), so one pair
// serves every goroutine.
var (
	euckrEnc transform.Transformer = korean.EUCKR.NewEncoder()
	euckrDec transform.Transformer = korean.EUCKR.NewDecoder()
)

func planFor(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	p := buildPlan(t)
	actual, _ := plans.LoadOrStore(t, p)
	return actual.(*plan)
}

func buildPlan(t reflect.Type) *plan {
	p := &plan{}
	fail := func(format string, args ...any) *plan {
		p.err = fmt.Errorf("telegram: layout %v: "+format, append([]any{t}, args...)...)
		p.fields = nil
		return p
	}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("tg")
		if tag == "-" {
			continue
		}
		if !ok {
			return fail("field %s has no tg tag (use `tg:\"-\"` to skip it)", sf.Name)
		}
		if !sf.IsExported() {
			return fail("field %s is unexported", sf.Name)
		}
		f, err := parseTag(sf, tag)
		if err != nil {
			return fail("field %s: %v", sf.Name, err)
		}
		f.index, f.offset = i, p.width
		p.fields = append(p.fields, f)
		p.width += f.width
	}
	if len(p.fields) == 0 {
		return fail("no fields")
	}
	return p
}

// parseTag reads `tg:"WIDTH,KIND[,trunc]"`.
func parseTag(sf reflect.StructField, tag string) (field, error) {
	f := field{name: sf.Name, goKind: sf.Type.Kind()}
	parts := strings.Split(tag, ",")
	if len(parts) < 2 {
		return f, fmt.Errorf("tag %q: want WIDTH,KIND[,trunc]", tag)
	}
	w, err := strconv.Atoi(parts[0])
	if err != nil || w < 1 || w > maxFieldWidth {
		return f, fmt.Errorf("tag %q: width %q is not a number in 1..%d", tag, parts[0], maxFieldWidth)
	}
	f.width = w
	switch parts[1] {
	case "n":
		f.kind = numeric
	case "an":
		f.kind = alnum
	case "text":
		f.kind = text
	default:
		return f, fmt.Errorf("tag %q: unknown kind %q (want n, an or text)", tag, parts[1])
	}
	for _, opt := range parts[2:] {
		if opt != "trunc" || f.kind != text || f.trunc {
			return f, fmt.Errorf("tag %q: option %q (only text fields take trunc, once)", tag, opt)
		}
		f.trunc = true
	}
	switch {
	case f.goKind == reflect.String:
	case f.kind != numeric:
		return f, fmt.Errorf("kind %s needs a string, not %v", parts[1], sf.Type)
	case isInt(f.goKind) || isUint(f.goKind):
		typeMax := uint64(1)<<(sf.Type.Bits()-1) - 1
		if isUint(f.goKind) {
			typeMax = typeMax<<1 | 1
		}
		if w > 19 || pow10(w)-1 > typeMax {
			return f, fmt.Errorf("%d digits do not fit in %v", w, sf.Type)
		}
		f.max = pow10(w) - 1
	default:
		return f, fmt.Errorf("kind n needs an integer or a string, not %v", sf.Type)
	}
	return f, nil
}

func isInt(k reflect.Kind) bool { return k >= reflect.Int && k <= reflect.Int64 }

func isUint(k reflect.Kind) bool { return k >= reflect.Uint && k <= reflect.Uint64 }

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// structValue returns the struct v holds or points to.
func structValue(v any, settable bool) (reflect.Value, *plan, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return rv, nil, fmt.Errorf("telegram: nil %v", rv.Type())
		}
		rv = rv.Elem()
	} else if settable {
		return rv, nil, fmt.Errorf("telegram: Unmarshal needs a pointer to a struct, not %T", v)
	}
	if rv.Kind() != reflect.Struct {
		return rv, nil, fmt.Errorf("telegram: %T is not a struct or a pointer to one", v)
	}
	p := planFor(rv.Type())
	return rv, p, p.err
}

// Layout checks the tags of v's struct type (v a struct, a pointer to one, or
// a nil pointer of that type) and returns the width of its body. Marshal and
// Unmarshal return the same error for a bad layout; tests call Layout so a
// bad tag fails the build's tests, not a request.
func Layout(v any) (width int, err error) {
	t := reflect.TypeOf(v)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return 0, fmt.Errorf("telegram: %T is not a struct or a pointer to one", v)
	}
	p := planFor(t)
	return p.width, p.err
}

// Marshal appends the fixed-width encoding of v (a struct or a pointer to
// one) to dst. On error dst is returned unchanged, and the error is a
// *FieldError naming the field whose value does not fit, or a layout error.
func Marshal(dst []byte, v any) ([]byte, error) {
	rv, p, err := structValue(v, false)
	if err != nil {
		return dst, err
	}
	start := len(dst)
	for i := range p.fields {
		f := &p.fields[i]
		if dst, err = f.encode(dst, rv.Field(f.index)); err != nil {
			return dst[:start], err
		}
	}
	return dst, nil
}

// Unmarshal decodes data, which must be exactly as long as the layout of the
// struct v points to, into it. Trailing bytes are an error: a caller whose
// frames carry filler checks and cuts it first. A field that does not hold a
// valid value is a *FieldError naming it; v may then be partly set.
func Unmarshal(data []byte, v any) error {
	rv, p, err := structValue(v, true)
	if err != nil {
		return err
	}
	if len(data) != p.width {
		return fmt.Errorf("telegram: %d bytes for a %d-byte %v", len(data), p.width, rv.Type())
	}
	for i := range p.fields {
		f := &p.fields[i]
		if err := f.decode(data[f.offset:f.offset+f.width], rv.Field(f.index)); err != nil {
			return err
		}
	}
	return nil
}

func (f *field) encode(dst []byte, v reflect.Value) ([]byte, error) {
	switch f.kind {
	case numeric:
		if f.goKind == reflect.String {
			return f.encodeDigits(dst, v.String())
		}
		var u uint64
		if isInt(f.goKind) {
			n := v.Int()
			if n < 0 {
				return dst, fieldErr(f, "negative value %d", n)
			}
			u = uint64(n)
		} else {
			u = v.Uint()
		}
		if u > f.max {
			return dst, fieldErr(f, "%d does not fit in %d digits", u, f.width)
		}
		dst = appendFill(dst, '0', f.width)
		for i := len(dst) - 1; u > 0; i, u = i-1, u/10 {
			dst[i] = byte('0' + u%10)
		}
		return dst, nil
	case alnum:
		s := v.String()
		if len(s) > f.width {
			return dst, fieldErr(f, "%q is longer than %d bytes", s, f.width)
		}
		for i := 0; i < len(s); i++ {
			if !printable(s[i]) {
				return dst, fieldErr(f, "%q is not printable ASCII", s)
			}
		}
		dst = append(dst, s...)
		return appendFill(dst, ' ', f.width-len(s)), nil
	default:
		return f.encodeText(dst, v.String())
	}
}

func (f *field) encodeDigits(dst []byte, s string) ([]byte, error) {
	if len(s) > f.width {
		return dst, fieldErr(f, "%q is longer than %d digits", s, f.width)
	}
	if !allDigits(s) {
		return dst, fieldErr(f, "%q is not all digits", s)
	}
	dst = appendFill(dst, '0', f.width-len(s))
	return append(dst, s...), nil
}

// encodeText appends s in EUC-KR, space-padded to the field. It never cuts
// inside a character: with trunc it drops the characters that do not fit
// whole, otherwise a value longer than the field is an error.
func (f *field) encodeText(dst []byte, s string) ([]byte, error) {
	ascii := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= utf8.RuneSelf:
			ascii = false
		case !printable(c):
			return dst, fieldErr(f, "control character %q in text", c)
		}
	}
	if ascii {
		if len(s) > f.width {
			if !f.trunc {
				return dst, fieldErr(f, "text of %d bytes is longer than %d", len(s), f.width)
			}
			s = s[:f.width]
		}
		dst = append(dst, s...)
		return appendFill(dst, ' ', f.width-len(s)), nil
	}
	if !utf8.ValidString(s) {
		return dst, fieldErr(f, "text %q is not valid UTF-8", s)
	}
	// Work in dst's spare capacity, so encoding allocates nothing of its own:
	// [start, start+width) the field, then a copy of s (the transformer takes
	// bytes), then the encoding, never longer than the UTF-8 it comes from.
	start := len(dst)
	dst = appendFill(dst, ' ', f.width+2*len(s))
	src := dst[start+f.width : start+f.width+len(s)]
	copy(src, s)
	enc := dst[start+f.width+len(s):]
	n, _, err := euckrEnc.Transform(enc, src, true)
	if err != nil {
		return dst[:start], fieldErr(f, "text %q cannot be encoded in EUC-KR", s)
	}
	enc = enc[:n]
	if n > f.width {
		if !f.trunc {
			return dst[:start], fieldErr(f, "text of %d bytes in EUC-KR is longer than %d", n, f.width)
		}
		enc = enc[:cutEUCKR(enc, f.width)]
	}
	copy(dst[start:], enc)
	return dst[:start+f.width], nil
}

// cutEUCKR returns the longest prefix of b, at most max bytes, that ends on a
// character boundary. Every byte from 0x80 up leads a two-byte character.
func cutEUCKR(b []byte, max int) int {
	i := 0
	for i < len(b) {
		size := 1
		if b[i] >= utf8.RuneSelf {
			size = 2
		}
		if i+size > max {
			break
		}
		i += size
	}
	return i
}

func (f *field) decode(b []byte, v reflect.Value) error {
	switch f.kind {
	case numeric:
		if !allDigits(b) {
			return fieldErr(f, "%q is not all digits", b)
		}
		switch {
		case f.goKind == reflect.String:
			v.SetString(string(b))
		case isInt(f.goKind):
			v.SetInt(int64(parseDigits(b))) // width checked against the type: no overflow
		default:
			v.SetUint(parseDigits(b))
		}
	case alnum:
		b = trimSpaces(b)
		for _, c := range b {
			if !printable(c) {
				return fieldErr(f, "%q is not printable ASCII", b)
			}
		}
		v.SetString(string(b))
	default:
		s, err := decodeText(trimSpaces(b))
		if err != nil {
			return &FieldError{Field: f.name, Err: err}
		}
		v.SetString(s)
	}
	return nil
}

var errBadEUCKR = errors.New("not valid EUC-KR")

func decodeText(b []byte) (string, error) {
	ascii := true
	for _, c := range b {
		switch {
		case c >= utf8.RuneSelf:
			ascii = false
		case !printable(c):
			// Trail bytes are never below 0x41 nor 0x7f: this is a control
			// character, not part of a two-byte one.
			return "", fmt.Errorf("control character %q in text", c)
		}
	}
	if ascii {
		return string(b), nil
	}
	// Hangul and Hanja take two bytes in EUC-KR and three in UTF-8.
	out := make([]byte, len(b)*3/2+3)
	n, _, err := euckrDec.Transform(out, b, true)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errBadEUCKR, err)
	}
	out = out[:n]
	// The decoder writes U+FFFD for bytes that are not EUC-KR, and EUC-KR
	// has no U+FFFD of its own.
	for i := 0; i < len(out); {
		r, size := utf8.DecodeRune(out[i:])
		if r == utf8.RuneError {
			return "", fmt.Errorf("%w: % x", errBadEUCKR, b)
		}
		i += size
	}
	return string(out), nil
}

func printable(c byte) bool { return c >= 0x20 && c < 0x7f }

func allDigits[S string | []byte](s S) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func parseDigits(b []byte) uint64 {
	var n uint64
	for _, c := range b {
		n = n*10 + uint64(c-'0')
	}
	return n
}

func trimSpaces(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

func appendFill(dst []byte, c byte, n int) []byte {
	dst = slices.Grow(dst, n)
	fill := dst[len(dst) : len(dst)+n]
	for i := range fill {
		fill[i] = c
	}
	return dst[:len(dst)+n]
}
