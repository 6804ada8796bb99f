package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/ui"
	"github.com/siteops/siteops/internal/waves"
	"github.com/siteops/siteops/internal/waves/diagram"
	"github.com/siteops/siteops/internal/waves/plan"
	"github.com/siteops/siteops/internal/waves/repo"
)

func TestSiteopsUIRunsAsTheKubeconfigUser(t *testing.T) {
	e := &env{c: testenv.APIServer(t)}
	tenant := e.c.Tenant(t, "ui-local", nil)
	other := e.c.Namespace(t, "ui-local-other", nil)
	// Nothing delivers here: the Decofiles exist, which is all the page lists.
	createSite(t, e, tenant.Namespace, "shop")
	createSite(t, e, other, "hidden-site")

	out := &testenv.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ui.RunLocal(ctx, tenant.Config, ui.LocalOptions{Address: "127.0.0.1:0", Namespace: tenant.Namespace, Scheme: e.c.Scheme, Out: out,
			Waves: homelabWaves})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("siteops ui stopped with %v", err)
		}
	})
	var address string
	testenv.Eventually(t, 30*time.Second, func() error {
		_, after, ok := strings.Cut(out.String(), "open ")
		if !ok {
			return io.ErrUnexpectedEOF
		}
		address = strings.TrimSpace(after)
		return nil
	})
	if !strings.Contains(out.String(), "siteops ui for "+tenant.Name) {
		t.Errorf("the banner does not name the kubeconfig's user: %q", out.String())
	}
	base, _, _ := strings.Cut(address, "?")

	// Without the token: refused.
	res, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: HTTP %d, want 401", res.StatusCode)
	}
	// With it: the browser gets a cookie and the token leaves the address.
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar}
	res, err = cl.Get(address)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || strings.Contains(res.Request.URL.RawQuery, "token") {
		t.Fatalf("with the token: HTTP %d at %s", res.StatusCode, res.Request.URL)
	}
	if !strings.Contains(string(body), "decofile/"+tenant.Namespace+"/shop") || strings.Contains(string(body), "hidden-site") {
		t.Errorf("the overview does not show exactly the tenant's own site:\n%s", body)
	}

	// The Waves page draws the repository's plan; hovering a node tells its blast radius.
	res, err = cl.Get(base + "waves")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	page := string(body)
	if res.StatusCode != http.StatusOK || !strings.Contains(page, "<svg") || strings.Contains(page, "<?xml") {
		t.Fatalf("waves page: HTTP %d, want an embedded SVG drawing:\n%.800s", res.StatusCode, page)
	}
	if !strings.Contains(page, "gitea, wave 0: a failure blocks 6 nodes behind it in the wave chain, 1 that depend on it") {
		t.Errorf("the drawing's nodes do not tell their blast radius on hover:\n%.2000s", page)
	}
	if strings.Count(page, "<tr><td><code>") != 16 {
		t.Errorf("the blast radius table has %d rows, want the 16 nodes of examples/homelab", strings.Count(page, "<tr><td><code>"))
	}
}

// homelabWaves plans the waves of the sample repository examples/homelab.
func homelabWaves(context.Context) (*diagram.Graph, error) {
	r, err := repo.OnDisk(filepath.Join("..", "..", "examples", "homelab"), repo.DefaultLayout)
	if err != nil {
		return nil, err
	}
	s, err := waves.Load(r, plan.DefaultOptions)
	if err != nil {
		return nil, err
	}
	return diagram.New(s.Catalog, s.Waves, s.Plan), nil
}
