package gitwriter

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/testenv"
)

// TestCommandsAnsweredWhileRemoteCannotOpen: a remote that refused the first connection and then
// accepts and never answers keeps the writer's open attempts failing; meanwhile a CloseWindow is
// answered at once with ErrRemoteUnavailable and the failure, instead of waiting for the remote.
func TestCommandsAnsweredWhileRemoteCannotOpen(t *testing.T) {
	l := testenv.LoopbackListener(t)
	accepted := make(chan struct{}, 64)
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	go func() {
		for n := 0; ; n++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if n == 0 {
				_ = c.Close() // the first attempt fails at once
			} else {
				mu.Lock()
				held = append(held, c) // later ones: accepted, never answered
				mu.Unlock()
			}
			accepted <- struct{}{}
		}
	}()
	w, _ := startWriter(t, Config{URL: "http://" + l.Addr().String() + "/repo.git", Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"},
		RetryInterval: 10 * time.Millisecond, Timeout: time.Hour})
	// The second attempt is in flight (and hangs for the hour) once its connection was accepted.
	<-accepted
	<-accepted
	if w.Status().LastError == nil {
		t.Fatal("the failed open is not in the writer's status")
	}
	// The bound only keeps a regression from hanging the test; the answer comes at once.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := w.CloseWindow(ctx, Command{Target: "t", Message: "release"})
	if !errors.Is(err, ErrRemoteUnavailable) {
		t.Fatalf("CloseWindow while the remote cannot be opened = %v, want ErrRemoteUnavailable", err)
	}
	if !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("the error does not name the remote: %v", err)
	}
}
