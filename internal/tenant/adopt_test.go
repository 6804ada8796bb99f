package tenant_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

// TestAdoptV011ACLUser: a tenant namespace provisioned by v0.11 (its ACL user on the master and
// the replica, its valkey-acl Secret) is taken over by the tenant part configured only through
// v0.11's environment (VALKEY_SENTINEL_URLS as redis:// URLs, VALKEY_SENTINEL_MASTER_NAME,
// VALKEY_ADMIN_PASSWORD): the password is not changed, on the nodes or in the Secret.
func TestAdoptV011ACLUser(t *testing.T) {
	const admin, v011Password = "admin-pw", "password-minted-by-v011"
	c := testenv.APIServer(t)
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Password: admin, MasterName: "valkey-main"})
	nodes := []string{set.Master.Addr, set.Replicas[0].Addr}
	ctx := context.Background()

	ten := c.Tenant(t, "sites-v011-", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user := provision.Username(ten.Namespace)
	for _, n := range nodes {
		r := redis.NewClient(&redis.Options{Addr: n, Password: admin, Protocol: 2})
		err := r.Do(ctx, "acl", "setuser", user, "on", ">"+v011Password, "~"+user+":*", "~lock:"+user+":*", "+@all").Err()
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: decov1.ValkeyACLSecretName, Namespace: ten.Namespace},
		Data: map[string][]byte{decov1.ValkeyACLUsernameKey: []byte(user), decov1.ValkeyACLPasswordKey: []byte(v011Password)}}
	if err := c.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}

	var urls []string
	for _, a := range set.SentinelAddrs() {
		urls = append(urls, "redis://"+a)
	}
	t.Setenv(tenant.EnvLegacySentinelURLs, strings.Join(urls, ","))
	t.Setenv(tenant.EnvLegacySentinelMaster, "valkey-main")
	t.Setenv(tenant.EnvAdminPassword, admin)
	o := tenant.Options{}
	o.BindFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
	o.ResyncPeriod, o.RolloutPoll = time.Hour, 200*time.Millisecond
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{Scheme: c.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tenant.Setup(mgr, o); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)

	testenv.Eventually(t, 30*time.Second, func() error {
		var ns corev1.Namespace
		if err := c.Client.Get(ctx, client.ObjectKey{Name: ten.Namespace}, &ns); err != nil {
			return err
		}
		if d := ns.Annotations[provision.AnnotationPasswordDigest]; d != acl.HashPassword(v011Password) {
			return fmt.Errorf("namespace records password digest %q, want the v0.11 password's", d)
		}
		return nil
	})
	var s corev1.Secret
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(secret), &s); err != nil {
		t.Fatal(err)
	}
	if string(s.Data[decov1.ValkeyACLPasswordKey]) != v011Password || string(s.Data[decov1.ValkeyACLUsernameKey]) != user {
		t.Fatal("the valkey-acl Secret's credentials changed on adoption")
	}
	for _, n := range nodes {
		r := redis.NewClient(&redis.Options{Addr: n, Username: user, Password: v011Password, MaxRetries: -1, Protocol: 2})
		err := r.Ping(ctx).Err()
		r.Close()
		if err != nil {
			t.Fatalf("the v0.11 password no longer works on %s: %v", n, err)
		}
	}
}
