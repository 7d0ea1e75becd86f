package store

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// The leader's answers, as the server encodes them, decode to the data,
// to the key's absence, or to the library's *jetstream.APIError with the
// server's codes: a caller must tell "no leader yet" (the cell's intake
// waits for the next one) from a failure, by code.
func TestTheLeadersAnswers(t *testing.T) {
	answer := func(e *server.ApiError, m *server.StoredMsg) []byte {
		t.Helper()
		data, err := json.Marshal(server.JSApiMsgGetResponse{ApiResponse: server.ApiResponse{Type: server.JSApiMsgGetResponseType, Error: e}, Message: m})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	data, seq, err := leaderAnswer(answer(nil, &server.StoredMsg{Sequence: 7, Data: []byte(`{"id":"c1-x"}`)}))
	if err != nil || seq != 7 || string(data) != `{"id":"c1-x"}` {
		t.Errorf("a message: %q at %d, %v", data, seq, err)
	}
	if _, _, err := leaderAnswer(answer(server.NewJSNoMessageFoundError(), nil)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("no message: %v, want ErrKeyNotFound", err)
	}
	for _, e := range []*server.ApiError{
		server.NewJSClusterNotAvailError(),
		server.NewJSClusterNotLeaderError(),
		server.NewJSInsufficientResourcesError(),
		server.NewJSStreamNotFoundError(),
	} {
		_, _, err := leaderAnswer(answer(e, nil))
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.Code != e.Code || int(apiErr.ErrorCode) != int(e.ErrCode) || apiErr.Description != e.Description {
			t.Errorf("the server's %q (%d/%d): %#v, want a *jetstream.APIError with its codes", e.Description, e.Code, e.ErrCode, err)
		}
	}
}
