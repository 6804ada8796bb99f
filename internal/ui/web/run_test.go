package web

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/ui/access"
)

// TestStopsWithAConnectionThatSentNothing: a client may open a connection and never send a
// request on it (an HTTP client's spare dial); stopping the UI then ends without an error.
func TestStopsWithAConnectionThatSentNothing(t *testing.T) {
	s, err := New(Backend{Objects: fake.NewClientBuilder().WithScheme(scheme.New()).Build(), Access: access.NewAuthorizer(allowAll{}, 0)},
		Options{Authenticator: person{User: "admin"}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hs := &http.Server{ReadHeaderTimeout: time.Minute}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, hs, func() error { return hs.Serve(ln) }) }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(100 * time.Millisecond) // accepted
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the UI stopped with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the UI did not stop")
	}
}
