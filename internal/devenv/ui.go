package devenv

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/siteops/siteops/internal/ui"
)

// StartUI serves the web UI as the environment's admin on a free loopback port until ctx is
// done, as `siteops ui` does, and returns the address to open (with its sign-in token).
func (e *Env) StartUI(ctx context.Context) (string, error) {
	ready := make(chan string, 1)
	failed := make(chan error, 1)
	go func() {
		failed <- ui.RunLocal(ctx, e.Config, ui.LocalOptions{Address: "127.0.0.1:0", Namespace: "default", Scheme: e.Client.Scheme(),
			Out: io.Discard, Ready: func(url string) { ready <- url }})
	}()
	select {
	case url := <-ready:
		e.uiURL = url
		return url, nil
	case err := <-failed:
		return "", fmt.Errorf("start the web UI: %w", err)
	case <-time.After(time.Minute):
		return "", fmt.Errorf("start the web UI: not serving after a minute")
	}
}
