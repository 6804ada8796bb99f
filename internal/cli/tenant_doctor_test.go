package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant/settings"
	"github.com/siteops/siteops/internal/testenv"
)

func TestTenantDoctor(t *testing.T) {
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := NewRootCommand()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"tenant", "doctor"}, args...))
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	bare := testenv.Redis(t, servers.RedisOptions{})
	out, err := run("--valkey-url", "redis://"+bare.Addr)
	if err == nil || !strings.Contains(err.Error(), "5 settings are missing") {
		t.Fatalf("doctor of a node with defaults: %v\n%s", err, out)
	}
	for _, want := range []string{"FAIL", "maxmemory-policy", "CONFIG SET proto-max-bulk-len 16mb", "ACL SETUSER default off"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	fit := testenv.Redis(t, servers.RedisOptions{Password: "admin-secret", Config: settings.Recommended})
	out, err = run("--valkey-url", "redis://"+fit.Addr, "--valkey-admin-password", "admin-secret")
	if err != nil || strings.Contains(out, "FAIL") || strings.Count(out, " pass ") != 5 {
		t.Fatalf("doctor of a node with the settings: %v\n%s", err, out)
	}
}
