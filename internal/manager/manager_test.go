package manager_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

func TestFlagsParse(t *testing.T) {
	o := manager.DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--controllers=decofile,mirror", "--leader-elect=false", "--webhook-port=10443"}); err != nil {
		t.Fatal(err)
	}
	if o.LeaderElect || o.WebhookPort != 10443 || !o.Enabled(manager.PartMirror) || o.Enabled(manager.PartTenant) {
		t.Fatalf("flags not applied: %+v", o)
	}
	if !manager.DefaultOptions().LeaderElect {
		t.Error("leader election must be on by default")
	}
}

func TestUnknownControllerIsRejected(t *testing.T) {
	o := manager.DefaultOptions()
	o.Controllers = []string{"decofile", "dns"}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), `unknown part "dns"`) {
		t.Fatalf("Validate() = %v, want an error naming the unknown part", err)
	}
}

func TestManagerServesProbesAndMetrics(t *testing.T) {
	c := testenv.APIServer(t)
	o := manager.DefaultOptions()
	o.Controllers = nil
	o.LeaderElect = true
	o.LeaderElectionNamespace = "default"
	o.LeaderElectionID = testenv.Name(t)
	o.MetricsAddr = freeAddr(t)
	o.ProbeAddr = freeAddr(t)
	mgr, err := manager.New(c.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager stopped with %v", err)
		}
	}()
	select {
	case <-mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("manager was not elected leader within 30s")
	}
	for _, u := range []string{"http://" + o.ProbeAddr + "/healthz", "http://" + o.ProbeAddr + "/readyz", "http://" + o.MetricsAddr + "/metrics"} {
		testenv.Eventually(t, 10*time.Second, func() error {
			resp, err := http.Get(u)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", u, resp.Status)
			}
			return nil
		})
	}
}

func freeAddr(t *testing.T) string {
	port, err := servers.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// TestLegacyControllerNames: v0.11's --controllers part names run the siteops part that does the
// same work, its Deco/DecoRedirect parts are accepted and ignored, and each gets a deprecation line.
func TestLegacyControllerNames(t *testing.T) {
	o := manager.DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--controllers=decofile,valkey-acl,deco,decoredirect"}); err != nil {
		t.Fatal(err)
	}
	if !o.Enabled(manager.PartDecofile) || !o.Enabled(manager.PartTenant) || o.Enabled(manager.PartMirror) || o.Enabled("") {
		t.Fatalf("parts enabled wrongly for %v", o.Controllers)
	}
	err := o.Validate()
	if err != nil && strings.Contains(err.Error(), "unknown part") {
		t.Fatalf("v0.11 part names rejected: %v", err)
	}
	d := strings.Join(o.Deprecations(), "\n")
	for _, want := range []string{`"valkey-acl" (published Decofile operator v0.11) is deprecated: use --controllers=tenant`, `"deco"`, `"decoredirect"`} {
		if !strings.Contains(d, want) {
			t.Errorf("deprecations %q lack %q", d, want)
		}
	}
	if strings.Contains(d, `"decofile"`) {
		t.Errorf("decofile is a siteops name, not deprecated: %q", d)
	}
}
