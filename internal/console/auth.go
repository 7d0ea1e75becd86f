package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// cookieName is the console's session cookie. Its value is a session's
// random id, never the token: it ends at logout, at the session's TTL, or
// with the process.
const cookieName = "cellkit_console"

// maxLoginBody bounds the sign-in form.
const maxLoginBody = 4 << 10

// The reasons a request is refused (cellkit_console_auth_failures_total).
const (
	refusedMissing = "missing" // no token, cookie or certificate
	refusedWrong   = "wrong"   // a token that is not the console's
	refusedExpired = "expired" // a session cookie ended, expired or not the console's
	refusedLimited = "limited" // a token while its client's (or everyone's) budget of wrong ones is spent: 429
)

// access is what a request's credentials let it do.
type access struct {
	ok      bool
	session *session      // the session it came in with, if any
	reason  string        // why not (refused…)
	wait    time.Duration // with refusedLimited: when to try again
}

// authenticated says whether r may see the console, and if not, why.
func (c *Console) authenticated(r *http.Request) access {
	if c.cfg.ClientCerts && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 &&
		(c.cfg.ClientRole == "" || tlsconf.PeerHasRole(r.TLS, c.cfg.ClientRole)) {
		return access{ok: true}
	}
	reason := refusedMissing
	if ck, err := r.Cookie(cookieName); err == nil {
		if ss := c.sessions.lookup(ck.Value, c.now()); ss != nil {
			return access{ok: true, session: ss}
		}
		reason = refusedExpired
	}
	if scheme, tok, found := strings.Cut(r.Header.Get("Authorization"), " "); found && strings.EqualFold(scheme, "Bearer") {
		ok, wait := c.tryToken(r, strings.TrimSpace(tok))
		switch {
		case ok:
			return access{ok: true}
		case wait > 0:
			return access{reason: refusedLimited, wait: wait}
		}
		reason = refusedWrong
	}
	return access{reason: reason}
}

// tryToken checks a token presented to get in: not compared at all while
// r's client (or everyone) has spent its budget of wrong ones (wait says
// for how long), charged to it when wrong.
func (c *Console) tryToken(r *http.Request, tok string) (ok bool, wait time.Duration) {
	if tok == "" || c.cfg.Token == "" {
		return false, 0 // nothing to compare: not a guess
	}
	return c.signIns.try(r, c.now(), func() bool { return equal(tok, c.cfg.Token) })
}

func equal(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// sessionKey holds a request's session in its context.
type sessionKey struct{}

// sessionOf is the session r came in with (nil: a bearer token or a
// client certificate).
func sessionOf(r *http.Request) *session {
	ss, _ := r.Context().Value(sessionKey{}).(*session)
	return ss
}

// guard serves next to authenticated requests. A page asked for with
// ?token= and the right token gets a session cookie and is sent to itself
// without the token; any other request without credentials gets 401: a
// problem for the API, the sign-in page (no data) for a page; a token
// tried while wrong ones are limited gets 429.
func (c *Console) guard(api bool, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tok := r.URL.Query().Get("token"); tok != "" && !api {
			switch ok, wait := c.tryToken(r, tok); {
			case wait > 0:
				c.limited(w, wait)
			case !ok:
				c.refuse(w, r, api, refusedWrong)
			default:
				q := r.URL.Query()
				q.Del("token")
				u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
				c.signIn(w, r, u.String())
			}
			return
		}
		a := c.authenticated(r)
		switch {
		case a.reason == refusedLimited:
			c.limited(w, a.wait)
			return
		case !a.ok:
			c.refuse(w, r, api, a.reason)
			return
		case a.session != nil:
			r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, a.session))
		}
		next(w, r)
	}
}

// signIn starts a session, gives its cookie (for https only when r came
// over TLS) and sends the browser to to.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request, to string) {
	id, _, err := c.sessions.start(c.now())
	if err != nil {
		problem.Write(w, problem.New(http.StatusInternalServerError, problem.Internal, "cannot make a session: "+err.Error()))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, MaxAge: int(c.cfg.SessionTTL / time.Second),
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// logout ends the request's session (POST /logout: the page's Sign out)
// and its event streams, takes the cookie back and sends the browser to
// the sign-in page. The cookie is SameSite=Strict: another site cannot
// end it.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(cookieName); err == nil {
		c.sessions.end(ck.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, MaxAge: -1,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// refuse answers 401.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, api bool, reason string) {
	detail := map[string]string{
		refusedMissing: "the console needs its token: open the URL `cellctl console` printed, or send Authorization: Bearer TOKEN",
		refusedWrong:   "the token is not the console's",
		refusedExpired: "the session has ended or expired: sign in again",
	}[reason]
	c.metrics.refused.WithLabelValues(reason).Inc()
	w.Header().Set("WWW-Authenticate", `Bearer realm="cellkit-console"`)
	if api || r.Method != http.MethodGet {
		problem.Write(w, problem.New(http.StatusUnauthorized, problem.Unauthorized, detail))
		return
	}
	c.page(w, http.StatusUnauthorized, "signin.html")
}

// limited answers 429: a token tried while its client's, or everyone's,
// budget of wrong tokens is spent.
func (c *Console) limited(w http.ResponseWriter, wait time.Duration) {
	c.metrics.refused.WithLabelValues(refusedLimited).Inc()
	secs := int((wait + time.Second - 1) / time.Second)
	problem.WriteRetry(w, problem.New(http.StatusTooManyRequests, problem.RateLimited,
		fmt.Sprintf("too many wrong tokens from this client (or from all): the next is checked in %d s", max(secs, 1))), wait)
}

// login takes the sign-in form's token (POST /login).
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		problem.Write(w, problem.New(http.StatusUnsupportedMediaType, problem.UnsupportedMediaType, "send the sign-in form (application/x-www-form-urlencoded)"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
			problem.Write(w, problem.New(http.StatusRequestEntityTooLarge, problem.BodyTooLarge, "the sign-in form is over 4 KiB"))
			return
		}
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidBody, "the sign-in form cannot be read: "+err.Error()))
		return
	}
	switch ok, wait := c.tryToken(r, strings.TrimSpace(r.PostForm.Get("token"))); {
	case wait > 0:
		c.limited(w, wait)
	case !ok:
		c.metrics.refused.WithLabelValues(refusedWrong).Inc()
		c.page(w, http.StatusUnauthorized, "signin.html")
	default:
		c.signIn(w, r, "/")
	}
}
