package egress

import "net/url"

// Redact returns raw without the credentials it may carry, for messages, status and logs. A
// URL that does not parse is not shown at all: its credentials could be in a form Parse cannot
// strip. A user name alone on an ssh:// URL (ssh://git@host) is kept: it is not a secret.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User == nil {
		return raw
	}
	if _, hasPassword := u.User.Password(); !hasPassword && u.Scheme == "ssh" {
		return raw
	}
	u.User = nil
	return u.String()
}
