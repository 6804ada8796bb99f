package node

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
)

// APIPort is the port, on the machine's end of the veth pair, where the node's namespace (its
// kube-proxy, its pods) reaches the API server, which listens on the machine's loopback.
const APIPort = 6443

// forwarder relays TCP connections from the node's address to the API server.
type forwarder struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func startForwarder(listen, target string) (*forwarder, error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listen for the node's API server connections on %s: %w", listen, err)
	}
	f := &forwarder{l: l, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.relay(c)
		}()
	}
}

func (f *forwarder) track(c net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		return false
	}
	if add {
		f.conns[c] = struct{}{}
	} else {
		delete(f.conns, c)
	}
	return true
}

func (f *forwarder) relay(in net.Conn) {
	defer in.Close()
	out, err := net.Dial("tcp", f.target)
	if err != nil {
		return
	}
	defer out.Close()
	if !f.track(in, true) || !f.track(out, true) {
		return
	}
	defer f.track(in, false)
	defer f.track(out, false)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
}

// close stops accepting, ends every relayed connection and waits for them.
func (f *forwarder) close() {
	_ = f.l.Close()
	f.mu.Lock()
	for c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}

// namespaceKubeConfig rewrites kubeconfig for clients in the node's namespace: the server is the
// forwarder at addr, and TLS still verifies the API server's certificate under its original
// host name. It also returns the API server's original host:port.
func namespaceKubeConfig(kubeconfig []byte, addr string) ([]byte, string, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("node kubeconfig: %w", err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.Clusters[ctx.Cluster] == nil {
		return nil, "", errors.New("node kubeconfig: no current context with a cluster")
	}
	cluster := cfg.Clusters[ctx.Cluster]
	u, err := url.Parse(cluster.Server)
	if err != nil || u.Host == "" {
		return nil, "", fmt.Errorf("node kubeconfig: server %q is not a URL", cluster.Server)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "443")
	}
	if cluster.TLSServerName == "" {
		cluster.TLSServerName = u.Hostname()
	}
	cluster.Server = "https://" + addr
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, "", err
	}
	return b, target, nil
}
