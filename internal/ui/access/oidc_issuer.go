package access

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

// summary describes an error from the issuer in one line: the token endpoint's status and
// error code, not its response (withheldBodies keeps response bodies out of every error).
func summary(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		s := "refused"
		if re.Response != nil {
			s = "HTTP " + fmt.Sprint(re.Response.StatusCode)
		}
		if errorCode.MatchString(re.ErrorCode) {
			s += " " + re.ErrorCode
		}
		return s
	}
	s := err.Error()
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// withheldBodies returns a client for the issuer whose failed responses (4xx, 5xx) carry no
// body but the OAuth error code: go-oidc and oauth2 quote the bodies in their errors, and what
// an issuer says there is nothing to log or show.
func withheldBodies(c *http.Client) *http.Client {
	out := &http.Client{Timeout: 30 * time.Second}
	if c != nil {
		*out = *c
	}
	next := out.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	out.Transport = bodiesWithheld{next}
	return out
}

type bodiesWithheld struct{ next http.RoundTripper }

func (t bodiesWithheld) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if err != nil || res.StatusCode < 400 {
		return res, err
	}
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	_ = res.Body.Close()
	var e struct {
		Error string `json:"error"`
	}
	kept := ""
	if json.Unmarshal(b, &e) == nil && errorCode.MatchString(e.Error) {
		kept = `{"error":"` + e.Error + `"}`
		res.Header.Set("Content-Type", "application/json")
	} else {
		res.Header.Del("Content-Type")
	}
	res.Body, res.ContentLength = io.NopCloser(strings.NewReader(kept)), int64(len(kept))
	res.Header.Del("Content-Length")
	return res, nil
}

// random is n random bytes, base64url without padding.
func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
