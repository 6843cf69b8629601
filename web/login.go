package web

import (
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/auth"
)

// loginView is what the sign-in page shows.
type loginView struct {
	Next   string
	Error  string
	Status int
}

// loginForm shows the sign-in form. A sign-in cookie that no longer
// holds a valid token (expired, revoked) is cleared: the API sent the
// browser here because of it.
func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(auth.SessionCookie); err == nil {
		if _, err := h.checkToken(c.Value); err != nil {
			clearSession(w, r)
		}
	}
	h.renderLogin(w, r, &loginView{Next: safeNext(r.URL.Query().Get("next")), Status: http.StatusOK})
}

// loginSubmit checks the token posted and, when it is a person's valid
// token, keeps it in the sign-in cookie and sends the browser to next (a
// local path only); a bad token shows the form again with why (401), a
// token the store cannot check says so alone (503, the cause logged), a
// request from another site is refused (403), and past the client's rate
// limit the answer is 429.
func (h *Handler) loginSubmit(w http.ResponseWriter, r *http.Request) {
	v := &loginView{Status: http.StatusUnauthorized}
	if err := auth.SameOrigin(r); err != nil {
		v.Status, v.Error = http.StatusForbidden, err.Error()
		h.renderLogin(w, r, v)
		return
	}
	if h.cfg.Limiter != nil {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		if ok, after := h.cfg.Limiter.Allow("refused:" + host); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(after.Seconds()+0.999))))
			v.Status, v.Error = http.StatusTooManyRequests, "too many sign-in attempts; retry after "+after.Round(time.Second).String()
			h.renderLogin(w, r, v)
			return
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		v.Status, v.Error = http.StatusBadRequest, "the form could not be read: "+err.Error()
		h.renderLogin(w, r, v)
		return
	}
	v.Next = safeNext(r.PostForm.Get("next"))
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	if strings.HasPrefix(strings.ToLower(tok), "bearer ") {
		tok = strings.TrimSpace(tok[len("bearer "):])
	}
	if tok == "" {
		v.Error = "paste a token (berth token create prints one)"
		h.renderLogin(w, r, v)
		return
	}
	id, err := h.checkToken(tok)
	if err == nil && !id.IsPerson() {
		err = berth.Errorf(berth.ECodeUnauthorized, "a %s token cannot sign in to the dashboard: it needs a viewer, user, operator or admin token", id.Role)
	}
	if err != nil {
		// Anyone may post here: a token the store cannot check is said so
		// (503), the store's error logged, not shown.
		pub := api.PublicError(r, err)
		v.Error = pub.Text()
		if status := api.Status(pub.Code); status >= http.StatusInternalServerError {
			v.Status = status
		}
		h.renderLogin(w, r, v)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: auth.SessionCookie, Value: tok, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	next := v.Next
	if next == "" {
		next = "/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout clears the sign-in cookie and sends the browser to the sign-in
// page.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	clearSession(w, r)
	http.Redirect(w, r, api.LoginPath, http.StatusSeeOther)
}

func clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: auth.SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// checkToken validates tok with the configured checker.
func (h *Handler) checkToken(tok string) (auth.Identity, error) {
	if h.cfg.CheckToken == nil {
		return auth.Identity{}, berth.Errorf(berth.ECodeUnauthorized, "this server does not accept tokens")
	}
	return h.cfg.CheckToken(tok)
}

// safeNext returns next when it is a path on this server ("/jobs?x=1"),
// and "" for anything else: another site ("https://…", "//host", "/\host"
// which browsers read as "//host"), a relative path, control characters,
// or the sign-in page itself.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || len(next) > 2048 {
		return ""
	}
	if strings.IndexFunc(next, func(c rune) bool { return c < 0x20 || c == 0x7f || c == '\\' }) >= 0 {
		return ""
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Path == api.LoginPath {
		return ""
	}
	return next
}

func (h *Handler) renderLogin(w http.ResponseWriter, r *http.Request, v *loginView) {
	h.write(w, r, h.login, "login", v, v.Status)
}
