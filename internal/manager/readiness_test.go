package manager_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestReadinessIsServingWebhooks: a replica is Ready when it serves its webhooks, and stays
// Ready while the mirror's Redis is down. Redis in readiness would take every replica out of the
// webhook Service, and the fail-closed injection webhook would refuse every workload.
func TestReadinessIsServingWebhooks(t *testing.T) {
	c := testenv.APIServer(t)
	redis := testenv.Redis(t, servers.RedisOptions{Dir: t.TempDir()})
	o := manager.DefaultOptions()
	o.Controllers = []string{manager.PartMirror}
	o.LeaderElect = false
	o.MetricsAddr = "0"
	o.ProbeAddr = testenv.FreeLoopbackAddr(t)
	host, port, err := net.SplitHostPort(testenv.FreeLoopbackAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	o.WebhookHost = host
	o.WebhookPort, _ = strconv.Atoi(port)
	o.WebhookCertDir = t.TempDir()
	o.WebhookSelfSigned = true
	o.WebhookCertHosts = []string{host}
	o.Mirror.RedisAddr = redis.Addr
	o.Mirror.CommitRequestWebhookClientCA = testenv.NewMTLS(t, "kube-apiserver", "127.0.0.1").CAFile
	mgr, err := manager.New(c.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.StartManager(t, mgr)()

	readyz := func() (int, string, error) {
		resp, err := http.Get("http://" + o.ProbeAddr + "/readyz?verbose")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		code, body, err := readyz()
		if err != nil {
			return err
		}
		if code != http.StatusOK || !strings.Contains(body, "[+]webhooks ok") {
			return fmt.Errorf("readyz %d: %s", code, body)
		}
		return nil
	})

	if err := redis.Kill(); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", redis.Addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("Redis at %s still accepts connections", redis.Addr)
	}
	// Each readiness request runs every check, so one answer after Redis is gone says it all.
	code, body, err := readyz()
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK {
		t.Fatalf("with the mirror's Redis down, readyz = %d, want 200 (the replica still serves its webhooks):\n%s", code, body)
	}
}
