package provision_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/testenv"
)

const reasonReservedKeyPrefix = "ValkeyACLReservedKeyPrefix"

// TestSecurityMirrorKeyPrefixRefused: the mirror keeps its cursors and attribution facts under
// "siteops:" on the same Valkey as the tenants. A namespace whose user would be "siteops" gets
// ~siteops:* and must be refused, with a Warning on the namespace; the tenant in it gets no
// credentials, and a tenant next to it cannot reach the mirror's keys either.
func TestSecurityMirrorKeyPrefixRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	master := e.admin(e.nodes[0])
	defer master.Close()
	const mirrorKey = "siteops:watch:v1:target:uid:/configmaps:cluster:last-rv"
	if err := master.Set(ctx, mirrorKey, "42", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The platform names the namespace; it is created as is (not generated) to collide.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sites-siteops", Annotations: map[string]string{decov1.AnnotationValkeyACL: "true"}}}
	if err := e.c.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.Client.Delete(context.Background(), ns) })
	tn := e.c.TenantIn(t, ns.Name)
	testenv.Eventually(t, 20*time.Second, func() error { return hasEvent(e.c, ns.Name, reasonReservedKeyPrefix) })

	// A neighbour provisioned after the refusal shows the controller has moved past it.
	other := e.namespace(t, "sites-neighbour", map[string]string{decov1.AnnotationValkeyACL: "true"})
	oUser, oPass := e.waitSecret(t, other, "")
	for _, n := range e.nodes {
		if ok, err := e.userExists(ctx, n, "siteops"); ok || err != nil {
			t.Errorf("user siteops exists on %s (%v): its ~siteops:* covers the mirror's keys", n, err)
		}
	}
	var s corev1.Secret
	if err := tn.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: decov1.ValkeyACLSecretName}, &s); !apierrors.IsNotFound(err) {
		t.Errorf("the tenant of the refused namespace reads a valkey-acl Secret: %v", err)
	}
	var got corev1.Namespace
	if err := e.c.Client.Get(ctx, client.ObjectKey{Name: ns.Name}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Finalizers) != 0 {
		t.Errorf("refused namespace holds finalizers %v", got.Finalizers)
	}
	c := redis.NewClient(&redis.Options{Addr: e.nodes[0], Username: oUser, Password: oPass, MaxRetries: -1, Protocol: 2})
	defer c.Close()
	if err := c.Get(ctx, mirrorKey).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("neighbour GET of the mirror's key: %v, want NOPERM", err)
	}
	if v, err := master.Get(ctx, mirrorKey).Result(); err != nil || v != "42" {
		t.Fatal(fmt.Errorf("mirror's key after the attempts: %q %w", v, err))
	}
}
