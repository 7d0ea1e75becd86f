package telegram

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// sample exercises every kind and Go type the codec takes.
type sample struct {
	Num    int    `tg:"6,n"`
	Big    uint64 `tg:"19,n"`
	Small  int8   `tg:"2,n"`
	Digits string `tg:"5,n"`
	Code   string `tg:"8,an"`
	Name   string `tg:"6,text"`
	Note   string `tg:"20,text,trunc"`
	Skip   string `tg:"-"`
}

const sampleWidth = 6 + 19 + 2 + 5 + 8 + 6 + 20

// ga is 가 in EUC-KR.
const ga = "\xb0\xa1"

func TestLayout(t *testing.T) {
	for _, v := range []any{sample{}, &sample{}, (*sample)(nil)} {
		if w, err := Layout(v); w != sampleWidth || err != nil {
			t.Errorf("Layout(%T) = %d, %v; want %d, nil", v, w, err, sampleWidth)
		}
	}
	if w, err := Layout(niceBody{}); w != niceBodyWidth || err != nil {
		t.Errorf("Layout(niceBody) = %d, %v; want %d, nil", w, err, niceBodyWidth)
	}
	if w, err := Layout(kcbBody{}); w != kcbBodyWidth || err != nil {
		t.Errorf("Layout(kcbBody) = %d, %v; want %d, nil", w, err, kcbBodyWidth)
	}
	first, second := planFor(reflect.TypeFor[sample]()), planFor(reflect.TypeFor[sample]())
	if first != second {
		t.Error("planFor built the sample plan twice")
	}
}

func TestLayoutErrors(t *testing.T) {
	type noTag struct {
		A int `tg:"2,n"`
		B int
	}
	type unexported struct {
		//lint:ignore U1000 the point is that the codec refuses it
		a int `tg:"2,n"`
	}
	type badWidth struct {
		A string `tg:"x,an"`
	}
	type zeroWidth struct {
		A string `tg:"0,an"`
	}
	type hugeWidth struct {
		A string `tg:"5000,an"`
	}
	type noKind struct {
		A string `tg:"4"`
	}
	type badKind struct {
		A string `tg:"4,x"`
	}
	type truncNumeric struct {
		A int `tg:"4,n,trunc"`
	}
	type truncAlnum struct {
		A string `tg:"4,an,trunc"`
	}
	type truncTwice struct {
		A string `tg:"4,text,trunc,trunc"`
	}
	type alnumInt struct {
		A int `tg:"4,an"`
	}
	type textInt struct {
		A int `tg:"4,text"`
	}
	type numericFloat struct {
		A float64 `tg:"4,n"`
	}
	type tooWideInt8 struct {
		A int8 `tg:"3,n"`
	}
	type tooWideInt64 struct {
		A int64 `tg:"19,n"`
	}
	type tooWideUint64 struct {
		A uint64 `tg:"20,n"`
	}
	type empty struct{}
	type onlySkipped struct {
		A string `tg:"-"`
	}
	tests := []struct {
		v    any
		want string
	}{
		{noTag{}, "field B has no tg tag"},
		{unexported{}, "field a is unexported"},
		{badWidth{}, `width "x" is not a number`},
		{zeroWidth{}, `width "0" is not a number`},
		{hugeWidth{}, `width "5000" is not a number`},
		{noKind{}, `want WIDTH,KIND`},
		{badKind{}, `unknown kind "x"`},
		{truncNumeric{}, `option "trunc"`},
		{truncAlnum{}, `option "trunc"`},
		{truncTwice{}, `option "trunc"`},
		{alnumInt{}, "kind an needs a string, not int"},
		{textInt{}, "kind text needs a string, not int"},
		{numericFloat{}, "kind n needs an integer or a string, not float64"},
		{tooWideInt8{}, "3 digits do not fit in int8"},
		{tooWideInt64{}, "19 digits do not fit in int64"},
		{tooWideUint64{}, "20 digits do not fit in uint64"},
		{empty{}, "no fields"},
		{onlySkipped{}, "no fields"},
		{42, "int is not a struct"},
		{nil, "<nil> is not a struct"},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%T", tt.v)
		if _, err := Layout(tt.v); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Layout(%s) = %v, want an error containing %q", name, err, tt.want)
		}
		// Marshal and Unmarshal report the same, rather than panic.
		if out, err := Marshal([]byte("x"), tt.v); err == nil || string(out) != "x" {
			t.Errorf("Marshal(%s) = %q, %v; want dst unchanged and an error", name, out, err)
		}
		if tt.v != nil {
			p := reflect.New(reflect.TypeOf(tt.v)).Interface()
			if err := Unmarshal(make([]byte, 8), p); err == nil {
				t.Errorf("Unmarshal(*%s) = nil, want an error", name)
			}
		}
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	long := strings.Repeat("a", 19)
	tests := []struct {
		name string
		in   sample
		want string // the encoding
		out  sample // what decodes from it
	}{
		{
			name: "zero value",
			want: "000000" + "0000000000000000000" + "00" + "00000" + "        " + "      " + strings.Repeat(" ", 20),
		},
		{
			name: "full fields",
			in:   sample{Num: 999999, Big: 9999999999999999999, Small: 99, Digits: "12345", Code: "ABCDEFGH", Name: "가나다", Note: strings.Repeat("x", 20)},
			want: "999999" + "9999999999999999999" + "99" + "12345" + "ABCDEFGH" + ga + "\xb3\xaa\xb4\xd9" + strings.Repeat("x", 20),
		},
		{
			name: "padding",
			in:   sample{Num: 42, Big: 7, Small: 3, Digits: "12", Code: "ab", Name: "가", Note: "조회 실패", Skip: "not encoded"},
			want: "000042" + "0000000000000000007" + "03" + "00012" + "ab      " + ga + "    " + "\xc1\xb6\xc8\xb8 \xbd\xc7\xc6\xd0" + strings.Repeat(" ", 11),
			out:  sample{Num: 42, Big: 7, Small: 3, Digits: "00012", Code: "ab", Name: "가", Note: "조회 실패"},
		},
		{
			name: "leading spaces kept, trailing spaces are padding",
			in:   sample{Code: " a b ", Note: " 가 "},
			want: "000000" + "0000000000000000000" + "00" + "00000" + " a b    " + "      " + " " + ga + strings.Repeat(" ", 17),
			out:  sample{Digits: "00000", Code: " a b", Note: " 가"},
		},
		{
			name: "character exactly on the boundary",
			in:   sample{Note: strings.Repeat("a", 18) + "가"},
			want: "000000" + "0000000000000000000" + "00" + "00000" + "        " + "      " + strings.Repeat("a", 18) + ga,
			out:  sample{Digits: "00000", Note: strings.Repeat("a", 18) + "가"},
		},
		{
			name: "character across the boundary is dropped, not split",
			in:   sample{Note: long + "가"},
			want: "000000" + "0000000000000000000" + "00" + "00000" + "        " + "      " + long + " ",
			out:  sample{Digits: "00000", Note: long},
		},
		{
			name: "long Korean text cut at a character boundary",
			in:   sample{Note: "a" + strings.Repeat("가", 15)},
			want: "000000" + "0000000000000000000" + "00" + "00000" + "        " + "      " + "a" + strings.Repeat(ga, 9) + " ",
			out:  sample{Digits: "00000", Note: "a" + strings.Repeat("가", 9)},
		},
		{
			name: "long ASCII text cut",
			in:   sample{Note: strings.Repeat("b", 30)},
			want: "000000" + "0000000000000000000" + "00" + "00000" + "        " + "      " + strings.Repeat("b", 20),
			out:  sample{Digits: "00000", Note: strings.Repeat("b", 20)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Marshal([]byte("prefix"), &tt.in)
			if err != nil {
				t.Fatalf("Marshal(%+v) = %v", tt.in, err)
			}
			if string(got) != "prefix"+tt.want {
				t.Fatalf("Marshal(%+v) =\n%q\nwant\n%q", tt.in, got, "prefix"+tt.want)
			}
			if byValue, _ := Marshal(nil, tt.in); !bytes.Equal(byValue, got[len("prefix"):]) {
				t.Errorf("Marshal by value = %q, by pointer %q", byValue, got[len("prefix"):])
			}
			want := tt.out
			if want == (sample{}) {
				want = tt.in
				want.Skip = ""
				if want.Digits == "" {
					want.Digits = "00000"
				}
			}
			var back sample
			if err := Unmarshal(got[len("prefix"):], &back); err != nil {
				t.Fatalf("Unmarshal(%q) = %v", got, err)
			}
			if back != want {
				t.Errorf("Unmarshal(Marshal(%+v)) = %+v, want %+v", tt.in, back, want)
			}
		})
	}
}

// wantFieldError checks that err is a *FieldError for field.
func wantFieldError(t *testing.T, call string, err error, field, detail string) {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != field {
		t.Errorf("%s = %v, want a *FieldError for %s", call, err, field)
		return
	}
	if !strings.Contains(err.Error(), "field "+field+": ") || !strings.Contains(err.Error(), detail) {
		t.Errorf("%s = %q, want it to name %s and say %q", call, err, field, detail)
	}
}

func TestMarshalErrors(t *testing.T) {
	tests := []struct {
		name   string
		in     sample
		field  string
		detail string
	}{
		{"negative", sample{Num: -1}, "Num", "negative value -1"},
		{"numeric overflow", sample{Num: 1000000}, "Num", "1000000 does not fit in 6 digits"},
		{"int8 overflow", sample{Small: 100}, "Small", "100 does not fit in 2 digits"},
		{"digit string too long", sample{Digits: "123456"}, "Digits", "longer than 5 digits"},
		{"digit string with a letter", sample{Digits: "12a"}, "Digits", `"12a" is not all digits`},
		{"digit string with a sign", sample{Digits: "-1"}, "Digits", "not all digits"},
		{"alphanumeric too long", sample{Code: "ABCDEFGHI"}, "Code", "longer than 8 bytes"},
		{"alphanumeric not ASCII", sample{Code: "café"}, "Code", "not printable ASCII"},
		{"alphanumeric control", sample{Code: "a\tb"}, "Code", "not printable ASCII"},
		{"alphanumeric DEL", sample{Code: "a\x7f"}, "Code", "not printable ASCII"},
		{"text too long", sample{Name: "가나다a"}, "Name", "7 bytes in EUC-KR is longer than 6"},
		{"ASCII text too long", sample{Name: "abcdefg"}, "Name", "7 bytes is longer than 6"},
		{"character across the boundary without trunc", sample{Name: "abcde가"}, "Name", "longer than 6"},
		{"text not in EUC-KR", sample{Name: "😀"}, "Name", "cannot be encoded in EUC-KR"},
		{"text not in EUC-KR after the cut", sample{Note: strings.Repeat("a", 25) + "😀"}, "Note", "cannot be encoded in EUC-KR"},
		{"text not UTF-8", sample{Name: "\xff"}, "Name", "not valid UTF-8"},
		{"text with a newline", sample{Note: "a\nb"}, "Note", "control character"},
		{"text with a NUL", sample{Note: "가\x00"}, "Note", "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Marshal([]byte("prefix"), &tt.in)
			wantFieldError(t, "Marshal", err, tt.field, tt.detail)
			if string(got) != "prefix" {
				t.Errorf("Marshal changed dst to %q on error", got)
			}
		})
	}
}

func TestUnmarshalErrors(t *testing.T) {
	valid, err := Marshal(nil, sample{Num: 1, Digits: "1", Code: "ok", Name: "가", Note: "note"})
	if err != nil {
		t.Fatal(err)
	}
	// put returns valid with s written at off.
	put := func(off int, s string) []byte {
		b := bytes.Clone(valid)
		copy(b[off:], s)
		return b
	}
	const (
		offNum    = 0
		offBig    = 6
		offDigits = 27
		offCode   = 32
		offName   = 40
		offNote   = 46
	)
	tests := []struct {
		name   string
		data   []byte
		field  string
		detail string
	}{
		{"letter in a number", put(offNum, "00a"), "Num", `"00a001" is not all digits`},
		{"space in a number", put(offBig, " "), "Big", "not all digits"},
		{"space-padded number", put(offNum, "1     "), "Num", "not all digits"},
		{"letter in a digit string", put(offDigits, "x"), "Digits", "not all digits"},
		{"control in alphanumeric", put(offCode, "\x00"), "Code", "not printable ASCII"},
		{"high byte in alphanumeric", put(offCode, "\xb0\xa1"), "Code", "not printable ASCII"},
		{"bad trail byte", put(offName, "\xb0\x20"), "Name", "not valid EUC-KR"},
		{"unmapped pair", put(offName, "\xc9\xa1"), "Name", "not valid EUC-KR"},
		{"0xff lead byte", put(offName, "\xff\xa1"), "Name", "not valid EUC-KR"},
		{"0x80 byte", put(offName, "\x80"), "Name", "not valid EUC-KR"},
		{"lone lead byte before padding", put(offName, "ab\xb0   "), "Name", "not valid EUC-KR"},
		{"lead byte at the end", put(offNote+19, "\xb0"), "Note", "not valid EUC-KR"},
		{"control character in text", put(offNote, "\n"), "Note", "control character"},
		{"DEL in text", put(offNote, "\x7f"), "Note", "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s sample
			wantFieldError(t, "Unmarshal", Unmarshal(tt.data, &s), tt.field, tt.detail)
		})
	}

	var s sample
	for _, data := range [][]byte{nil, valid[:len(valid)-1], append(bytes.Clone(valid), ' ')} {
		if err := Unmarshal(data, &s); err == nil || !strings.Contains(err.Error(), "bytes for a") {
			t.Errorf("Unmarshal(%d bytes) = %v, want a length error", len(data), err)
		}
	}
	if err := Unmarshal(valid, s); err == nil || !strings.Contains(err.Error(), "pointer") {
		t.Errorf("Unmarshal(struct value) = %v, want a pointer error", err)
	}
	if err := Unmarshal(valid, (*sample)(nil)); err == nil {
		t.Error("Unmarshal(nil pointer) = nil, want an error")
	}
}

func TestMarshalAllocs(t *testing.T) {
	v := &sample{Num: 42, Code: "abc", Name: "가나", Note: "정상 처리되었습니다"}
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = Marshal(buf[:0], v); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Marshal into a reused buffer allocates %v times, want 0", allocs)
	}
}

// fitLayout pads or cuts data to width with spaces, so the fuzzer reaches
// the fields rather than the length check.
func fitLayout(data []byte, width int) []byte {
	out := make([]byte, width)
	for i := range out {
		out[i] = ' '
	}
	copy(out, data)
	return out
}

func FuzzUnmarshalSample(f *testing.F) {
	for _, v := range []sample{
		{},
		{Num: 42, Big: 7, Small: 3, Digits: "12", Code: "ab", Name: "가", Note: "조회 실패"},
		{Num: 999999, Big: 9999999999999999999, Small: 99, Digits: "99999", Code: "~~~~~~~~", Name: "한글", Note: "a" + strings.Repeat("가", 9)},
	} {
		b, err := Marshal(nil, v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("0000a0"))
	f.Add(fitLayout([]byte("000000000000000000000000000000000ok      \xb0\xa1\xc9\xa1  \xff"), sampleWidth))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, d := range [][]byte{data, fitLayout(data, sampleWidth)} {
			var v sample
			if err := Unmarshal(d, &v); err != nil {
				continue
			}
			enc, err := Marshal(nil, &v)
			if err != nil {
				t.Fatalf("Unmarshal(%q) = %+v, which Marshal rejects: %v", d, v, err)
			}
			var back sample
			if err := Unmarshal(enc, &back); err != nil {
				t.Fatalf("Unmarshal(Marshal(%+v)) = %v", v, err)
			}
			if back != v {
				t.Fatalf("Unmarshal(%q) = %+v, but its encoding %q decodes to %+v", d, v, enc, back)
			}
			if !bytes.Equal(enc, d) {
				t.Fatalf("Unmarshal accepted %q, which does not encode back the same: %q", d, enc)
			}
		}
	})
}

// Every two-byte sequence that decodes as text encodes back to the same two
// bytes: the decoder accepts only what the encoder writes, so a text field
// that decodes can always be sent again unchanged.
func TestTextEveryPair(t *testing.T) {
	type one struct {
		T string `tg:"2,text"`
	}
	accepted := 0
	for c0 := 0x80; c0 <= 0xff; c0++ {
		for c1 := 0; c1 <= 0xff; c1++ {
			in := []byte{byte(c0), byte(c1)}
			var v one
			if err := Unmarshal(in, &v); err != nil {
				continue
			}
			accepted++
			out, err := Marshal(nil, &v)
			if err != nil {
				t.Fatalf("% x decodes to %q, which does not encode: %v", in, v.T, err)
			}
			if !bytes.Equal(out, in) {
				t.Fatalf("% x decodes to %q, which encodes as % x", in, v.T, out)
			}
		}
	}
	// KS X 1001 has 8,822 characters (2,350 Hangul among them); CP949 adds
	// the other 8,822 modern Hangul syllables.
	if accepted < 17000 {
		t.Errorf("%d two-byte characters decode, want the whole of CP949", accepted)
	}
	t.Logf("%d two-byte characters decode", accepted)
}
