package agencysim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/problem"
)

// maxAdminBody bounds a config document.
const maxAdminBody = 64 << 10

// Status is what GET / of the admin API answers: the whole picture of one
// simulated agency.
type Status struct {
	Agency string `json:"agency"`
	Addr   string `json:"addr"` // "" before Serve
	Config Config `json:"config"`
	Stats  Stats  `json:"stats"`
}

// Status returns the server's profile name, address, config and counters.
func (s *Server) Status() Status {
	st := Status{Agency: s.profile.Name, Config: s.Config(), Stats: s.Stats()}
	if a := s.Addr(); a != nil {
		st.Addr = a.String()
	}
	return st
}

// AdminHandler serves the server's admin API, relative to where it is
// mounted (use http.StripPrefix):
//
//	GET   /        Status (agency, address, config, stats)
//	GET   /config  the Config in force
//	PUT   /config  replace the Config (absent fields take their zero value)
//	PATCH /config  change only the fields present
//	GET   /stats   Stats
//
// Config documents are JSON with snake_case fields and durations as strings
// ("500ms"); see Config.MarshalJSON. A document that does not parse, has
// unknown fields or fails Validate is answered 400, a wrong method 405, an
// unknown path 404, all with an RFC 9457 problem body (docs/problems.md).
func (s *Server) AdminHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/", "":
			if allow(w, r, http.MethodGet) {
				httpx.Indent(w, http.StatusOK, s.Status())
			}
		case "/config":
			if !allow(w, r, http.MethodGet, http.MethodPut, http.MethodPatch) {
				return
			}
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				httpx.Indent(w, http.StatusOK, s.Config())
				return
			}
			s.putConfig(w, r)
		case "/stats":
			if allow(w, r, http.MethodGet) {
				httpx.Indent(w, http.StatusOK, s.Stats())
			}
		default:
			writeProblem(w, http.StatusNotFound, problem.NotFound, fmt.Sprintf("no admin resource at %q", r.URL.Path))
		}
	})
}

// putConfig handles PUT (replace) and PATCH (merge onto the current config).
func (s *Server) putConfig(w http.ResponseWriter, r *http.Request) {
	var cfg Config
	if r.Method == http.MethodPatch {
		cfg = s.Config()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAdminBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, http.StatusRequestEntityTooLarge, problem.BodyTooLarge, fmt.Sprintf("config over %d bytes", tooBig.Limit))
			return
		}
		writeProblem(w, http.StatusBadRequest, problem.InvalidBody, fmt.Sprintf("read config: %v", err))
		return
	}
	if err := json.Unmarshal(body, &cfg); err != nil {
		writeProblem(w, http.StatusBadRequest, problem.InvalidJSON, fmt.Sprintf("decode config: %v", err))
		return
	}
	if err := s.SetConfig(cfg); err != nil {
		writeProblem(w, http.StatusBadRequest, problem.InvalidConfig, err.Error())
		return
	}
	httpx.Indent(w, http.StatusOK, s.Config())
}

// allow reports whether r's method is one of methods (GET implies HEAD) and
// answers 405 with an Allow header otherwise.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	list := ""
	for _, m := range methods {
		if r.Method == m || (m == http.MethodGet && r.Method == http.MethodHead) {
			return true
		}
		if list != "" {
			list += ", "
		}
		list += m
		if m == http.MethodGet {
			list += ", " + http.MethodHead
		}
	}
	w.Header().Set("Allow", list)
	writeProblem(w, http.StatusMethodNotAllowed, problem.MethodNotAllowed, fmt.Sprintf("method %s not allowed; allowed: %s", r.Method, list))
	return false
}

// Problem is the body of every error answer of the admin API: an RFC 9457
// problem of one of the types in internal/problem.
type Problem = problem.Details

func writeProblem(w http.ResponseWriter, status int, typ, detail string) {
	problem.Write(w, problem.New(status, typ, detail))
}
