package agencysim

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

func adminServer(t *testing.T, srv *Server) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(hs.Close)
	return hs
}

func TestAdminConfig(t *testing.T) {
	t.Parallel()
	srv := startServer(t, telegram.NICE(), Config{MaxSessions: 80})
	hs := adminServer(t, srv)

	var got Config
	if resp := testkit.DoJSON(t, hs.Client(), http.MethodGet, hs.URL+"/config", nil, &got); resp.Status != http.StatusOK || got != srv.Config() {
		t.Fatalf("GET /config = %d %+v, want 200 %+v", resp.Status, got, srv.Config())
	}

	put := `{"max_sessions": 40, "latency": {"dist": "fixed", "fixed": "500ms"}, "error_rate": 0.25, "idle_timeout": "30s"}`
	want := Config{MaxSessions: 40, Latency: FixedLatency(500 * time.Millisecond), ErrorRate: 0.25, IdleTimeout: 30 * time.Second}
	if resp := testkit.DoJSON(t, hs.Client(), http.MethodPut, hs.URL+"/config", put, &got); resp.Status != http.StatusOK || got != want {
		t.Fatalf("PUT /config = %d %+v, want 200 %+v", resp.Status, got, want)
	}
	if srv.Config() != want {
		t.Errorf("Config() after PUT = %+v, want %+v", srv.Config(), want)
	}

	// PATCH: ten times slower, nothing else changes.
	want.Latency = want.Latency.Scaled(10)
	if resp := testkit.DoJSON(t, hs.Client(), http.MethodPatch, hs.URL+"/config", `{"latency": {"fixed": "5s"}}`, &got); resp.Status != http.StatusOK || got != want {
		t.Fatalf("PATCH /config = %d %+v, want 200 %+v", resp.Status, got, want)
	}
}

func TestAdminRejectsBadInput(t *testing.T) {
	t.Parallel()
	srv := startServer(t, telegram.KCB(), Config{MaxSessions: 40})
	hs := adminServer(t, srv)
	before := srv.Config()
	tests := []struct {
		name, method, path, body string
		status                   int
		detail                   string
	}{
		{"not JSON", http.MethodPut, "/config", `{"max_sessions": `, http.StatusBadRequest, "decode config"},
		{"empty body", http.MethodPut, "/config", ``, http.StatusBadRequest, "decode config"},
		{"unknown field", http.MethodPut, "/config", `{"max_session": 3}`, http.StatusBadRequest, "max_session"},
		{"duration as number", http.MethodPatch, "/config", `{"idle_timeout": 5}`, http.StatusBadRequest, "duration"},
		{"invalid value", http.MethodPut, "/config", `{"error_rate": 1.5}`, http.StatusBadRequest, "error rate 1.5"},
		{"invalid latency", http.MethodPatch, "/config", `{"latency": {"dist": "lognormal"}}`, http.StatusBadRequest, "log-normal"},
		{"too big", http.MethodPut, "/config", `{"seed": 1` + strings.Repeat(" ", maxAdminBody) + `}`, http.StatusRequestEntityTooLarge, "over"},
		{"wrong method", http.MethodPost, "/config", `{}`, http.StatusMethodNotAllowed, "POST"},
		{"wrong method on stats", http.MethodDelete, "/stats", ``, http.StatusMethodNotAllowed, "DELETE"},
		{"unknown path", http.MethodGet, "/nope", ``, http.StatusNotFound, "/nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Problem
			resp := testkit.DoJSON(t, hs.Client(), tt.method, hs.URL+tt.path, tt.body, &p)
			if resp.Status != tt.status {
				t.Errorf("%s %s = %d, want %d", tt.method, tt.path, resp.Status, tt.status)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q, want application/problem+json", ct)
			}
			if p.Status != tt.status || p.Type == "" || p.Title != http.StatusText(tt.status) || !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("problem = %+v, want status %d, a type, title %q and detail about %q", p, tt.status, http.StatusText(tt.status), tt.detail)
			}
			if tt.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
				t.Error("405 without an Allow header")
			}
		})
	}
	if srv.Config() != before {
		t.Errorf("Config() = %+v after rejected requests, want %+v unchanged", srv.Config(), before)
	}
}

func TestAdminStats(t *testing.T) {
	t.Parallel()
	srv := startServer(t, telegram.NICE(), Config{})
	hs := adminServer(t, srv)
	c := dial(t, srv)
	c.mustCall(1, "a")
	c.mustCall(2, "b")

	var st Stats
	if resp := testkit.DoJSON(t, hs.Client(), http.MethodGet, hs.URL+"/stats", nil, &st); resp.Status != http.StatusOK {
		t.Fatalf("GET /stats = %d", resp.Status)
	}
	if st.Calls != 2 || st.ActiveSessions != 1 || st.Accepted != 1 {
		t.Errorf("GET /stats = %+v, want 2 calls on 1 session", st)
	}
	var status Status
	testkit.DoJSON(t, hs.Client(), http.MethodGet, hs.URL+"/", nil, &status)
	if status.Agency != srv.Profile().Name || status.Addr != srv.Addr().String() || status.Stats.Calls != 2 {
		t.Errorf("GET / = %+v, want agency %s at %s with 2 calls", status, srv.Profile().Name, srv.Addr())
	}
}
