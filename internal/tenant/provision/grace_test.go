package provision_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/testenv"
)

// Names an operator of the cluster sees when a rotation is cut short.
const (
	reasonGraceExpired = "ValkeyACLRotationGraceExpired"
	metricRotationsCut = "siteops_tenant_rotations_cut_total"
)

// TestSecurityRotationEndsAfterMaxGrace: a password leaked, the platform rotates it, and the
// tenant's Deployment never rolls out (crash-looping, or a tenant that keeps it from rolling).
// The old password must stop working once --valkey-rotation-max-grace has passed, with a
// Warning on the namespace and the cut counted; the new one keeps working.
func TestSecurityRotationEndsAfterMaxGrace(t *testing.T) {
	const grace = 4 * time.Second
	c := testenv.APIServer(t)
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Password: adminPassword})
	startPart(t, c, tenant.Options{SentinelAddrs: set.SentinelAddrs(), SentinelMaster: set.MasterName, RotationMaxGrace: grace})
	e := &env{c: c, set: set, nodes: []string{set.Master.Addr, set.Replicas[0].Addr}}
	ctx := context.Background()

	tn := c.Tenant(t, "sites-leaked", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, leaked := e.waitSecret(t, tn.Namespace, "")
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, leaked) })
	injectedDeployment(t, c, tn.Namespace) // never reports a finished rollout
	cuts, _ := metricValue(metricRotationsCut, map[string]string{"reason": "max_grace"})

	rotated := time.Now()
	e.annotate(t, tn.Namespace, map[string]*string{decov1.AnnotationValkeyACLRotate: ptr.To("leak-1")})
	_, fresh := e.waitSecret(t, tn.Namespace, leaked)
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, fresh) })
	if err := e.authEverywhere(ctx, user, leaked); err != nil {
		t.Fatalf("the old password was refused right after the rotation, before the grace: %v", err)
	}

	testenv.Eventually(t, grace+15*time.Second, func() error {
		for _, n := range e.nodes {
			if err := auth(ctx, n, user, leaked); err == nil {
				return fmt.Errorf("the old password is still accepted on %s %v after the rotation", n, time.Since(rotated).Round(time.Second))
			}
		}
		return nil
	})
	took := time.Since(rotated)
	t.Logf("old password refused on every node %v after the rotation (max grace %v)", took.Round(100*time.Millisecond), grace)
	if took < grace-time.Second {
		// RFC 3339 keeps whole seconds: the cut may come up to a second early.
		t.Errorf("the old password was cut after %v, before the %v grace", took, grace)
	}
	if err := e.authEverywhere(ctx, user, fresh); err != nil {
		t.Fatalf("the new password stopped working: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, func() error { return hasEvent(c, tn.Namespace, reasonGraceExpired) })
	if v, _ := metricValue(metricRotationsCut, map[string]string{"reason": "max_grace"}); v-cuts != 1 {
		t.Errorf("%s{reason=max_grace} rose by %v, want 1", metricRotationsCut, v-cuts)
	}
	var ns corev1.Namespace
	if err := c.Client.Get(ctx, client.ObjectKey{Name: tn.Namespace}, &ns); err != nil {
		t.Fatal(err)
	}
	if v := ns.Annotations[provision.AnnotationRetiring]; v != "" {
		t.Fatalf("the namespace still lists retiring passwords: %q", v)
	}
	time.Sleep(time.Second) // more rollout polls: the cut is not repeated, the new password stays
	if err := e.authEverywhere(ctx, user, fresh); err != nil {
		t.Fatalf("the new password stopped working: %v", err)
	}
}
