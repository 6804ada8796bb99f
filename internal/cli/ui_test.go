package cli

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/mirror/verify"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/ui"
)

// TestUIMirrorPageVerifiesAttribution: with --verify-repo and --audit-log, the Mirror page shows
// what `siteops mirror verify` finds: here a change committed as bob that the audit log says
// alice made.
func TestUIMirrorPageVerifiesAttribution(t *testing.T) {
	c := testenv.APIServer(t)
	check := verifyOptions{repo: mirrorRepo(t, "bob"), auditLog: auditLogFile(t)}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- ui.RunLocal(ctx, c.Config, ui.LocalOptions{Address: "127.0.0.1:0", Namespace: "default", Scheme: c.Scheme, Out: io.Discard,
			Ready:  func(url string) { ready <- url },
			Verify: func(context.Context) (*verify.Report, error) { return verifyAttribution(check) }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("siteops ui stopped with %v", err)
		}
	})
	var address string
	select {
	case address = <-ready:
	case err := <-done:
		t.Fatalf("siteops ui: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("siteops ui did not serve within a minute")
	}
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar}
	if res, err := cl.Get(address); err != nil {
		t.Fatal(err)
	} else {
		res.Body.Close()
	}
	base, _, _ := strings.Cut(address, "?")
	res, err := cl.Get(base + "mirror")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	page := string(body)
	for _, want := range []string{"Attribution against the audit log", "Mismatches", "<td>exact_user</td><td>1</td><td>0</td><td>0.0%</td>",
		html.EscapeString("bob <bob@users.noreply.invalid>"), html.EscapeString("alice <alice@users.noreply.invalid>"), "clusters/prod/web/core/configmaps/a.yaml"} {
		if !strings.Contains(page, want) {
			t.Errorf("the Mirror page lacks %q:\n%s", want, page)
		}
	}
}
