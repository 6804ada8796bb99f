package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/testenv"
)

// get reads a page through a person's proxy.
func get(t *testing.T, base, path string) (int, string) {
	t.Helper()
	res, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// TestPagesShowIsolationProofs: with the tenant part running against real Valkey nodes, the
// platform team's overview lists each node's last isolation proof, a tenant's page says its
// user's; a rule widened by hand on a node shows as forbidden commands allowed.
func TestPagesShowIsolationProofs(t *testing.T) {
	const admin = "admin-pw"
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Password: admin, MasterName: "valkey-ui"})
	e := startUI(t, func(o *manager.Options) {
		o.Controllers = []string{manager.PartDecofile, manager.PartTenant}
		o.Tenant.SentinelAddrs, o.Tenant.SentinelMaster, o.Tenant.AdminPassword = set.SentinelAddrs(), "valkey-ui", admin
		o.Tenant.ResyncPeriod = 3 * time.Second
	})
	tenant := e.c.Tenant(t, "ui-valkey", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user := provision.Username(tenant.Namespace)
	adminBase := e.proxy(t, "platform-admin", "system:masters")
	tenantBase := e.proxy(t, tenant.Name)

	testenv.Eventually(t, time.Minute, func() error {
		_, page := get(t, adminBase, "/")
		for _, n := range []string{set.Master.Addr, set.Replicas[0].Addr} {
			if !strings.Contains(page, "<code>"+n+"</code>") {
				return fmt.Errorf("the overview lists no proof of node %s yet", n)
			}
		}
		return nil
	})
	testenv.Eventually(t, time.Minute, func() error {
		status, page := get(t, tenantBase, "/namespaces/"+tenant.Namespace)
		if status != http.StatusOK || !strings.Contains(page, "Isolation proved on 2 node(s)") || !strings.Contains(page, "no forbidden command allowed") {
			return fmt.Errorf("the tenant's page does not show a clean proof on both nodes (HTTP %d)", status)
		}
		return nil
	})
	if _, page := get(t, tenantBase, "/"); strings.Contains(page, set.Master.Addr) {
		t.Error("a tenant's overview shows the Valkey nodes' addresses")
	}

	// Someone widens the tenant's rule on the master by hand: the next proof finds it.
	r := redis.NewClient(&redis.Options{Addr: set.Master.Addr, Password: admin, Protocol: 2})
	defer r.Close()
	testenv.Eventually(t, time.Minute, func() error {
		if err := r.Do(context.Background(), "acl", "setuser", user, "allkeys", "+@all").Err(); err != nil {
			return err
		}
		_, page := get(t, adminBase, "/")
		if !strings.Contains(page, "("+user+")") {
			return fmt.Errorf("the overview does not name %s as allowed forbidden commands", user)
		}
		return nil
	})
}
