package egress

import (
	"errors"
	"io"
	"net"
)

// IsTimeout reports whether err is a network timeout.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// NetDetail describes a connection failure by its network error only (address, DNS, refused,
// reset): never a text the remote produced, which callers must not show (it could be an
// internal service's answer read on a tenant's behalf).
func NetDetail(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.Error()
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Error()
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "the connection closed early"
	}
	return "the remote's answer could not be read"
}
