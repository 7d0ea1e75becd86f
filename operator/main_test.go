package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// The release gates' latency thresholds come from the command line and a
// value no gate can use is refused with the flag named.
func TestGateLatencyFlags(t *testing.T) {
	env := func(string) string { return "" }
	o, err := parseFlags([]string{"--gate-latency-factor=1.5", "--gate-latency-margin=250ms"}, env, io.Discard)
	if err != nil || o.latencyFactor != 1.5 || o.latencyMargin != 250*time.Millisecond {
		t.Fatalf("parseFlags = %+v, %v", o, err)
	}
	for _, bad := range [][]string{
		{"--gate-latency-factor=0.9"}, {"--gate-latency-factor=NaN"}, {"--gate-latency-margin=0s"}, {"--gate-latency-margin=2m"},
	} {
		_, err := parseFlags(bad, env, io.Discard)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(strings.SplitN(bad[0], "=", 2)[0], "-")) {
			t.Errorf("%v: %v, want an error naming the flag", bad, err)
		}
	}
}
