package web_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/web"
)

// TestLoginHidesStoreErrors: the sign-in form, answered to anyone, says
// that a token cannot be checked (503) but not why — the store's error,
// its path and SQL state, stay out of the page.
func TestLoginHidesStoreErrors(t *testing.T) {
	t.Parallel()
	cause := errors.New("open /var/lib/berth/berth.db: SQLSTATE 57P01: terminating connection")
	h := web.New(web.Config{CheckToken: func(string) (auth.Identity, error) {
		return auth.Identity{}, berth.Errorf(berth.ECodeUnavailable, "cannot check the token").WithCause(cause)
	}})
	req := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"token": {"some-token"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(string(body), "cannot check the token") {
		t.Errorf("sign-in with the store failing: %d, want 503 saying the token cannot be checked:\n%s", rec.Code, body)
	}
	for _, leak := range []string{"/var/lib/berth", "SQLSTATE", "57P01", "terminating"} {
		if strings.Contains(string(body), leak) {
			t.Errorf("sign-in page shows %q of the store's error:\n%s", leak, body)
		}
	}
}
