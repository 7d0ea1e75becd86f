package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inquiry"
)

// Body is the request body of user u's request number seq, asking for the
// high lane if high: the same arguments always give the same body, so a
// retry with the same Idempotency-Key is the same request.
func Body(u, seq int, high bool) []byte {
	b, _ := json.Marshal(inquiry.Request{
		UserID: UserID(u), Product: "credit_loan", Amount: 1_000_000 + int64(seq%1000)*1000,
		Priority: map[bool]inquiry.Priority{true: inquiry.High, false: inquiry.Normal}[high],
	})
	return b
}

// highOf says whether request seq asks for the high lane, for a share of
// them: a fixed spread over the sequence (Weyl), the same in every run.
func highOf(seq int, share float64) bool {
	if share <= 0 {
		return false
	}
	return float64((uint64(seq)*0x9E3779B97F4A7C15)>>11)/(1<<53) < share
}

// readOf says whether request seq is a status read, for a share of them:
// a fixed spread over the sequence, apart from highOf's.
func readOf(seq int, share float64) bool {
	return share > 0 && highOf(seq*7919+1, share)
}

// read gets the status of s.ID and fills in s's outcome but the latency.
func (r *Runner) read(ctx context.Context, s *Sample) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.Target+api.PathInquiries+"/"+s.ID, nil)
	if err != nil {
		s.Err = err.Error()
		return
	}
	req.Header.Set("X-API-Key", r.cfg.Key)
	resp, err := r.opts.Client.Do(req)
	if err != nil {
		s.Err = errKind(err)
		return
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		s.Err = errKind(err)
		return
	}
	s.Status = resp.StatusCode
	s.Cell = resp.Header.Get(api.HeaderCell)
	s.RetryAfter = resp.Header.Get("Retry-After") != ""
}

// send posts s's inquiry and fills in its outcome but the latency, which
// the Generator measures. ctx bounds the request.
func (r *Runner) send(ctx context.Context, s *Sample) {
	st, hdr, body, err := post(ctx, r.opts.Client, r.cfg.Target, r.cfg.Key, s.Key, Body(s.User, s.Seq, s.High))
	if err != nil {
		s.Err = errKind(err)
		return
	}
	s.Status = st
	s.Cell = hdr.Get(api.HeaderCell)
	s.RetryAfter = hdr.Get("Retry-After") != ""
	if st >= 400 {
		var p struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(body, &p) == nil && p.Type != "" {
			s.Problem = path.Base(p.Type)
		}
	}
	if st == http.StatusAccepted {
		var a struct {
			ID   string `json:"id"`
			Cell string `json:"cell"`
		}
		if json.Unmarshal(body, &a) == nil {
			s.ID = a.ID
			if s.Cell == "" {
				s.Cell = a.Cell
			}
		}
	}
}

// post sends one POST /v1/inquiries.
func post(ctx context.Context, hc *http.Client, target, key, idemKey string, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+api.PathInquiries, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	if idemKey != "" {
		req.Header.Set(api.HeaderIdemKey, idemKey)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, b, nil
}

func errKind(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return err.Error()
}
