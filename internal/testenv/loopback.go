package testenv

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/siteops/siteops/internal/servers"
)

// loopbackNext numbers the 127.x.y.z addresses handed out in this process; 127.0.0.1 is left alone.
var loopbackNext atomic.Uint32

// LoopbackIP returns a distinct loopback address (127.0.1.1, 127.0.1.2, …) on each call, so a
// test can give every simulated pod its own IP, as in a cluster. Linux routes all of 127/8 to lo.
func LoopbackIP() string {
	n := loopbackNext.Add(1) - 1
	block, host := n/254+1, n%254+1 // block 0 is 127.0.0.x; host octets 1..254
	return fmt.Sprintf("127.%d.%d.%d", (block>>8)&0xff, block&0xff, host)
}

// LoopbackListener listens on a free port of a fresh loopback address and closes it when the
// test ends.
func LoopbackListener(t testing.TB) net.Listener {
	t.Helper()
	ip := LoopbackIP()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// FreeLoopbackAddr is a "127.0.0.1:port" free right now, for a server configured by address.
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	port, err := servers.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}
