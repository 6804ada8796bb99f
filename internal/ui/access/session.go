package access

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// sealer derives an AES-256-GCM key for purpose from secret.
func sealer(secret []byte, purpose string) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, secret, nil, purpose, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// seal encrypts and authenticates payload for the cookie called name.
func seal(a cipher.AEAD, name string, payload []byte) string {
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(payload)+a.Overhead())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(a.Seal(nonce, nonce, payload, []byte(name)))
}

// unseal opens what seal made for the cookie called name.
func unseal(a cipher.AEAD, name, value string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(b) < a.NonceSize()+a.Overhead() {
		return nil, errors.New("malformed")
	}
	return a.Open(nil, b[:a.NonceSize()], b[a.NonceSize():], []byte(name))
}

// session is what the session cookie holds: the person, named as the API server names them,
// and when the session ends.
type session struct {
	User    string   `json:"u"`
	Groups  []string `json:"g,omitempty"`
	Expires int64    `json:"e"`
}

// sessionCookie seals p's session until expires; ErrGroupsTooLarge when it would not fit in a
// cookie.
func (o *OIDC) sessionCookie(p Person, expires time.Time) (*http.Cookie, error) {
	payload, err := json.Marshal(session{User: p.User, Groups: p.Groups, Expires: expires.Unix()})
	if err != nil {
		return nil, err
	}
	v := seal(o.session, SessionCookieName, payload)
	if n := len(SessionCookieName) + 1 + len(v); n > maxSessionCookie {
		return nil, fmt.Errorf("%w: %d groups make a %d-byte cookie, more than the %d bytes a browser keeps", ErrGroupsTooLarge, len(p.Groups), n, maxSessionCookie)
	}
	return &http.Cookie{Name: SessionCookieName, Value: v, Path: "/", Expires: expires, HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode}, nil
}
