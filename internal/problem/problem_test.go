package problem

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteRetry(rec, New(http.StatusServiceUnavailable, Overloaded, "queue full").WithField("amount"), 1500*time.Millisecond)
	if rec.Code != 503 || rec.Header().Get("Content-Type") != "application/problem+json" || rec.Header().Get("Retry-After") != "2" {
		t.Fatalf("got %d %v", rec.Code, rec.Header())
	}
	var d Details
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	want := Details{Type: TypeBase + "overloaded", Title: "Service Unavailable", Status: 503, Detail: "queue full", Field: "amount"}
	if d != want {
		t.Fatalf("body = %+v, want %+v", d, want)
	}
}
