package egress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"golang.org/x/net/proxy"
)

// go-git's SSH transport lets a caller choose how it dials in one place only: the endpoint's
// proxy URL (transport.ProxyOptions), resolved through golang.org/x/net/proxy. SSHRoute
// registers one dialer per operation under a random name of a private scheme, so each
// operation's connections go through its own policy and deadline, and nothing else that uses
// go-git (or the proxy package) changes. Without a proxy URL go-git would dial directly, through
// ALL_PROXY when set.
const sshDialScheme = "siteops-egress"

var (
	sshDialers   sync.Map // id → *sshDialer
	registerOnce sync.Once
)

// SSHRoute is how one SSH operation dials.
type SSHRoute struct {
	// Deadline ends every connection of the operation (the whole SSH session), even when the
	// remote stops answering.
	Deadline time.Time
	// Wrap, when set, wraps each connection made (to count the bytes received, for example).
	Wrap func(net.Conn) net.Conn
	// Refused, when set, is called with each refusal of the policy, so the caller can report it
	// even when the SSH library wraps the error into one that loses it.
	Refused func(*Refused)
}

type sshDialer struct {
	policy *Policy
	route  SSHRoute
}

// SSHProxy registers route's dialer through p and returns the proxy URL to put in go-git's
// endpoint (transport.ProxyOptions{URL: …}) and the release to call when the operation ends.
func (p *Policy) SSHProxy(route SSHRoute) (proxyURL string, release func()) {
	registerOnce.Do(func() {
		proxy.RegisterDialerType(sshDialScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
			d, ok := sshDialers.Load(u.Host)
			if !ok {
				return nil, errors.New("the SSH operation already ended")
			}
			return d.(*sshDialer), nil
		})
	})
	buf := make([]byte, 16)
	_, _ = rand.Read(buf)
	id := hex.EncodeToString(buf)
	sshDialers.Store(id, &sshDialer{policy: p, route: route})
	return sshDialScheme + "://" + id, func() { sshDialers.Delete(id) }
}

func (d *sshDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

func (d *sshDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if !d.route.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.route.Deadline)
		defer cancel()
	}
	c, err := d.policy.DialContext(ctx, network, addr)
	if err != nil {
		var r *Refused
		if d.route.Refused != nil && errors.As(err, &r) {
			d.route.Refused(r)
		}
		return nil, err
	}
	if !d.route.Deadline.IsZero() {
		if err := c.SetDeadline(d.route.Deadline); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("set the SSH connection's deadline: %w", err)
		}
	}
	if d.route.Wrap != nil {
		return d.route.Wrap(c), nil
	}
	return c, nil
}
