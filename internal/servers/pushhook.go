package servers

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// pushedDir is the folder of a bare repository where its post-receive hook leaves one file per
// push: the "<old> <new> <ref>" lines git gives the hook.
const pushedDir = "siteops-pushed"

// postReceiveHook records what a push changed; the remote sends it on once the push is done.
const postReceiveHook = `#!/bin/sh
# Installed by siteops: records the refs this push changed (old new ref per line) for the
# push event the git remote sends to the operator.
mkdir -p ` + pushedDir + ` && cat > ` + pushedDir + `/push.$$
`

func installPushHook(dir string) error {
	hook := filepath.Join(dir, "hooks", "post-receive")
	if err := os.MkdirAll(filepath.Dir(hook), 0o755); err != nil {
		return fmt.Errorf("create hooks folder: %w", err)
	}
	if err := os.WriteFile(hook, []byte(postReceiveHook), 0o755); err != nil {
		return fmt.Errorf("install post-receive hook: %w", err)
	}
	return nil
}

// pushEvents sends push events for the pushes the hooks recorded.
type pushEvents struct {
	url    string
	secret []byte

	mu      sync.Mutex
	sent    int
	lastErr error
}

// AnnouncePushes makes the remote send a push event to url, signed with secret, after every
// push to a repository created from now on (see GitRemoteOptions.PushEventURL).
func (r *GitRemote) AnnouncePushes(url string, secret []byte) {
	r.events.mu.Lock()
	defer r.events.mu.Unlock()
	r.events.url, r.events.secret = url, secret
}

func (e *pushEvents) target() (string, []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.url, e.secret
}

// PushEvents is how many push events were accepted by the receiver, and the last failure.
func (r *GitRemote) PushEvents() (sent int, lastErr error) {
	r.events.mu.Lock()
	defer r.events.mu.Unlock()
	return r.events.sent, r.events.lastErr
}

// announcePushes wraps the backend: after a push (git-receive-pack) to a repository, the
// events its hook recorded are sent before the push's answer ends, so a `git push` that
// returned has been announced.
func (r *GitRemote) announcePushes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		next.ServeHTTP(w, req)
		if url, _ := r.events.target(); url == "" {
			return
		}
		repo, ok := strings.CutSuffix(path.Clean(req.URL.Path), "/git-receive-pack")
		if !ok || req.Method != http.MethodPost {
			return
		}
		name := strings.TrimSuffix(strings.TrimPrefix(repo, "/"), ".git")
		dir := r.RepoDir(name)
		if rel, err := filepath.Rel(r.Root, dir); err != nil || strings.HasPrefix(rel, "..") {
			return
		}
		r.events.record(r.sendPushed(req.Context(), name, filepath.Join(dir, pushedDir)))
	})
}

func (e *pushEvents) record(n int, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sent += n
	if err != nil {
		e.lastErr = err
	}
}

// sendPushed sends one event per ref in each recorded push file and removes the file.
func (r *GitRemote) sendPushed(ctx context.Context, name, dir string) (int, error) {
	files, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	sent := 0
	var errs []error
	for _, f := range files {
		p := filepath.Join(dir, f.Name())
		raw, err := os.ReadFile(p)
		_ = os.Remove(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) != 3 {
				continue
			}
			if err := r.sendEvent(ctx, name, fields[0], fields[1], fields[2]); err != nil {
				errs = append(errs, err)
				continue
			}
			sent++
		}
	}
	return sent, errors.Join(errs...)
}

// sendEvent posts one push event in the form Gitea and Forgejo send.
func (r *GitRemote) sendEvent(ctx context.Context, name, before, after, ref string) error {
	body, err := json.Marshal(map[string]any{
		"ref": ref, "before": before, "after": after,
		"repository": map[string]string{"full_name": name, "clone_url": r.RepoURL(name)},
	})
	if err != nil {
		return err
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	url, secret := r.events.target()
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Gitea-Event", "push")
	req.Header.Set("X-Gitea-Delivery", hex.EncodeToString(id))
	req.Header.Set("X-Gitea-Signature", hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("send the push event of %s %s: %w", name, ref, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("send the push event of %s %s: HTTP %d", name, ref, resp.StatusCode)
	}
	return nil
}
