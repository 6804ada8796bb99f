package mirror_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/shard"
	"github.com/siteops/siteops/internal/testenv"
)

// TestManagerAttributesCommits runs the whole mirror part with --author-attribution: the manager
// serves the audit receiver over mTLS, the API server (own instance, audit webhook configured)
// posts to it, and every commit names the user who made the change.
func TestManagerAttributesCommits(t *testing.T) {
	rcv := newAuditReceiver(t, "prod")
	c := testenv.NewAPIServer(t, servers.APIServerOptions{Configure: rcv.webhook.Configure})
	redis := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	runManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "attr", Attribution: rcv.options(4 * time.Second)}, "")
	f.target(t, "main", "clusters/dev", 0, "")
	f.watchRule(t, "cms", "main", cmRule())
	base := "clusters/dev/" + f.ns + "/core/configmaps/"
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sentinel", Namespace: f.ns}})
	f.waitFile(t, base+"sentinel.yaml", "sentinel")

	ctx := context.Background()
	user := func(name string) client.Client { return c.UserClient(t, name, "system:masters") }
	alice, bob := user("alice"), user("bob")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}, Data: map[string]string{"color": "blue"}}
	if err := alice.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	f.waitFile(t, base+"app.yaml", "blue")
	cm.Data["color"] = "green"
	if err := bob.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	f.waitFile(t, base+"app.yaml", "green")
	if err := alice.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	f.waitNoFile(t, base+"app.yaml")

	log := f.git(t, "log", "--format=%an <%ae> | %cn | %s", "main")
	ref := "v1/configmaps/" + f.ns + "/app"
	for _, want := range []string{
		"alice <alice@users.noreply.invalid> | Mirror Bot | [CREATE] " + ref,
		"bob <bob@users.noreply.invalid> | Mirror Bot | [UPDATE] " + ref,
		"alice <alice@users.noreply.invalid> | Mirror Bot | [DELETE] " + ref,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("history lacks %q:\n%s", want, log)
		}
	}
}

// TestShardAttributesFromTheMainInstancesReceiver: the API server posts its audit events to the
// main instance's receiver alone (the chart's audit Service selects only it), and a shard's
// writer still names the person: the facts reach it through Redis.
func TestShardAttributesFromTheMainInstancesReceiver(t *testing.T) {
	rcv := newAuditReceiver(t, "prod")
	c := testenv.NewAPIServer(t, servers.APIServerOptions{Configure: rcv.webhook.Configure})
	redis := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	instance := func(selector string, attr attribution.Options) {
		sel, err := shard.Parse(selector)
		if err != nil {
			t.Fatal(err)
		}
		runManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "shard-attr", Shard: sel, Attribution: attr}, "")
	}
	instance(shard.MainSelector, rcv.options(4*time.Second))
	// Shard a's own receiver listens where no API server posts.
	unused := rcv.options(4 * time.Second)
	unused.ListenAddress = testenv.FreeLoopbackAddr(t)
	instance(shard.ForShard("a"), unused)

	f.create(t, &mirrorv1alpha1.GitTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "sharded", Namespace: f.ns, Labels: map[string]string{shard.Key: "a"}},
		Spec:       mirrorv1alpha1.GitTargetSpec{ProviderRef: ref(f.provider), Branch: "main", Path: "sharded"},
	})
	f.watchRule(t, "cms", "sharded", cmRule())
	base := "sharded/" + f.ns + "/core/configmaps/"
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sentinel", Namespace: f.ns}})
	f.waitFile(t, base+"sentinel.yaml", "sentinel")

	alice := c.UserClient(t, "alice", "system:masters")
	if err := alice.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}, Data: map[string]string{"color": "blue"}}); err != nil {
		t.Fatal(err)
	}
	f.waitFile(t, base+"app.yaml", "blue")
	log := f.git(t, "log", "--format=%an <%ae> | %s%n%(trailers:key=Attribution,valueonly)", "main")
	if want := "alice <alice@users.noreply.invalid> | [CREATE] v1/configmaps/" + f.ns + "/app\nexact_user"; !strings.Contains(log, want) {
		t.Errorf("shard a did not name alice for her change:\n%s", log)
	}
}
