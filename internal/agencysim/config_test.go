package agencysim

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigJSONRoundTrip(t *testing.T) {
	cfg := Config{
		MaxSessions: 80, Latency: LogNormalLatency(500*time.Millisecond, 1500*time.Millisecond),
		ErrorRate: 0.05, GarbageRate: 0.01, ResetRate: 0.001, IdleTimeout: 30 * time.Second,
		BandwidthBytesPerSec: 125000, Seed: -3,
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"p50":"500ms"`, `"p99":"1.5s"`, `"idle_timeout":"30s"`, `"max_sessions":80`, `"dist":"lognormal"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("json.Marshal(cfg) = %s, want it to contain %s", b, want)
		}
	}
	var got Config
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got != cfg {
		t.Errorf("round trip = %+v, want %+v", got, cfg)
	}
}

func TestConfigJSONPatchKeepsAbsentFields(t *testing.T) {
	cfg := Config{MaxSessions: 80, Latency: LogNormalLatency(time.Second, 3*time.Second), ErrorRate: 0.1}
	if err := json.Unmarshal([]byte(`{"latency":{"p50":"10s"},"error_rate":0.5}`), &cfg); err != nil {
		t.Fatal(err)
	}
	want := Config{MaxSessions: 80, Latency: LogNormalLatency(10*time.Second, 3*time.Second), ErrorRate: 0.5}
	if cfg != want {
		t.Errorf("patched config = %+v, want %+v", cfg, want)
	}
}

func TestConfigJSONErrors(t *testing.T) {
	for _, doc := range []string{
		`{"max_sessions":"many"}`,
		`{"idle_timeout":30}`,
		`{"idle_timeout":"30 parsecs"}`,
		`{"latency":{"p50":"1s","p95":"2s"}}`,
		`{"maxsessions":1}`,
		`[]`,
	} {
		var cfg Config
		if err := json.Unmarshal([]byte(doc), &cfg); err == nil {
			t.Errorf("json.Unmarshal(%s) = nil, want an error", doc)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"zero", Config{}, ""},
		{"drill", Config{MaxSessions: 80, Latency: UniformLatency(0, time.Second), ErrorRate: 1, GarbageRate: 1, ResetRate: 1}, ""},
		{"negative sessions", Config{MaxSessions: -1}, "max sessions"},
		{"error rate over 1", Config{ErrorRate: 1.01}, "error rate"},
		{"NaN garbage rate", Config{GarbageRate: math.NaN()}, "garbage rate"},
		{"negative reset rate", Config{ResetRate: -0.1}, "reset rate"},
		{"negative idle timeout", Config{IdleTimeout: -time.Second}, "idle timeout"},
		{"negative bandwidth", Config{BandwidthBytesPerSec: -1}, "bandwidth"},
		{"bad latency", Config{Latency: LogNormalLatency(2*time.Second, time.Second)}, "log-normal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error about %s", err, tt.want)
			}
		})
	}
}

// FuzzConfigJSON feeds the admin API's decoder arbitrary documents: it never
// panics, and whatever it accepts survives a round trip unchanged.
func FuzzConfigJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"max_sessions":80,"latency":{"dist":"lognormal","p50":"500ms","p99":"1.5s"},"error_rate":0.05,"idle_timeout":"30s"}`,
		`{"latency":{"dist":"uniform","min":"0s","max":"2562047h47m16.854775807s"},"seed":-9223372036854775808}`,
		`{"latency":{"fixed":"-1ns"},"bandwidth_bytes_per_sec":125000}`,
		`{"error_rate":1e-320,"garbage_rate":1,"reset_rate":0}`,
		`{"latency":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var cfg Config
		if err := json.Unmarshal(doc, &cfg); err != nil {
			return
		}
		_ = cfg.Validate()
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", cfg, err)
		}
		var again Config
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatalf("Unmarshal(%s) of our own output: %v", b, err)
		}
		if again != cfg {
			t.Fatalf("round trip of %s = %+v, want %+v", b, again, cfg)
		}
	})
}
