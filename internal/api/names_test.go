package api

import (
	"strings"
	"testing"
)

// Every kind of name against bytes at and around its class's edges, its
// length bound, and the rules of its first and last byte.
func TestNames(t *testing.T) {
	cases := []struct {
		name  string
		valid func(string) bool
		good  []string
		bad   []string
	}{
		{"user", ValidUserID[string], []string{"u", "U-42_x", strings.Repeat("z", 64), "-", "0"},
			[]string{"", "u.1", "u 1", "u/1", "ü", strings.Repeat("z", 65), "u@", "u:1"}},
		{"inquiry id", ValidInquiryID[string], []string{"c1-0123456789abcdefghijklmnop", "a", strings.Repeat("i", 128)},
			[]string{"", "c1.x", "c1/x", strings.Repeat("i", 129)}},
		{"client", ValidClientID, []string{"acme", "a.b_c-d", "A9", strings.Repeat("c", 64)},
			[]string{"", "a b", "a:b", "a/b", strings.Repeat("c", 65), "a\x00"}},
		{"cell", ValidCellID[string], []string{"c1", "cell-2", "0", strings.Repeat("a", 32)},
			[]string{"", "-c", "c-", "C1", "c_1", "c.1", strings.Repeat("a", 33)}},
		{"agency", ValidAgency, []string{"nice", "kcb_2", "a"},
			[]string{"", "2kcb", "_a", "Nice", "a-b", strings.Repeat("a", 33)}},
		{"product", ValidProduct, []string{"loan", "card_2", "9"},
			[]string{"", "Loan", "a-b", strings.Repeat("p", 33)}},
		{"request id", func(s string) bool { return ValidRequestID([]byte(s)) }, []string{"r-1", "a.b:c_d"},
			[]string{"", "a b", "a/b", strings.Repeat("r", 65)}},
		{"idempotency key", ValidIdempotencyKey, []string{" ", "k ~!", strings.Repeat("k", 255)},
			[]string{"", "k\n", "k\x7f", "é", strings.Repeat("k", 256)}},
		{"forwarded host", func(s string) bool { return ValidForwardedHost([]byte(s)) }, []string{"example.com:8443", "[::1]:80"},
			[]string{"", "a b", "a\"b", "a/b", strings.Repeat("h", 101)}},
	}
	for _, c := range cases {
		for _, s := range c.good {
			if !c.valid(s) {
				t.Errorf("%s %q refused", c.name, s)
			}
		}
		for _, s := range c.bad {
			if c.valid(s) {
				t.Errorf("%s %q accepted", c.name, s)
			}
		}
	}
	if !ValidUserID([]byte("u-1")) || ValidCellID([]byte("c-")) {
		t.Error("the []byte forms differ from the string forms")
	}
}
