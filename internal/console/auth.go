package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// cookieName is the console's session cookie. Its value is a secret made
// at start, never the token: it dies with the process.
const cookieName = "cellkit_console"

// maxLoginBody bounds the sign-in form.
const maxLoginBody = 4 << 10

// authenticated says whether r may see the console, and if not, whether
// it presented something wrong (a token that is not the console's).
func (c *Console) authenticated(r *http.Request) (ok, wrong bool) {
	if c.cfg.ClientCerts && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 &&
		(c.cfg.ClientRole == "" || tlsconf.PeerHasRole(r.TLS, c.cfg.ClientRole)) {
		return true, false
	}
	if ck, err := r.Cookie(cookieName); err == nil {
		if equal(ck.Value, c.session) {
			return true, false
		}
		wrong = true
	}
	if scheme, tok, found := strings.Cut(r.Header.Get("Authorization"), " "); found && strings.EqualFold(scheme, "Bearer") {
		if c.tokenOK(strings.TrimSpace(tok)) {
			return true, false
		}
		wrong = true
	}
	return false, wrong
}

// tokenOK compares a presented token with the console's in constant time.
func (c *Console) tokenOK(tok string) bool {
	return c.cfg.Token != "" && tok != "" && equal(tok, c.cfg.Token)
}

func equal(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// guard serves next to authenticated requests. A page asked for with
// ?token= and the right token gets the session cookie and is sent to
// itself without the token; any other request without credentials gets
// 401: a problem for the API, the sign-in page (no data) for a page.
func (c *Console) guard(api bool, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tok := r.URL.Query().Get("token"); tok != "" && !api {
			if !c.tokenOK(tok) {
				c.refuse(w, r, api, true)
				return
			}
			c.setSession(w, r)
			q := r.URL.Query()
			q.Del("token")
			u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
			http.Redirect(w, r, u.String(), http.StatusSeeOther)
			return
		}
		ok, wrong := c.authenticated(r)
		if !ok {
			c.refuse(w, r, api, wrong)
			return
		}
		next(w, r)
	}
}

// setSession gives the session cookie, for https only when r came over
// TLS.
func (c *Console) setSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: c.session, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// refuse answers 401.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, api, wrong bool) {
	reason, detail := "missing", "the console needs its token: open the URL `cellctl console` printed, or send Authorization: Bearer TOKEN"
	if wrong {
		reason, detail = "wrong", "the token is not the console's"
	}
	c.metrics.refused.WithLabelValues(reason).Inc()
	w.Header().Set("WWW-Authenticate", `Bearer realm="cellkit-console"`)
	if api || r.Method != http.MethodGet {
		problem.Write(w, problem.New(http.StatusUnauthorized, problem.Unauthorized, detail))
		return
	}
	c.page(w, http.StatusUnauthorized, "signin.html")
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
	if !c.tokenOK(strings.TrimSpace(r.PostForm.Get("token"))) {
		c.metrics.refused.WithLabelValues("wrong").Inc()
		c.page(w, http.StatusUnauthorized, "signin.html")
		return
	}
	c.setSession(w, r)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
