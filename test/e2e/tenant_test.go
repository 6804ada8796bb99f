package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/test/cacheprobe/result"
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// tenantCache is step 5: a pod of the site namespace, given the valkey-acl Secret by the
// injection webhook (envFrom), authenticates to Valkey as its tenant, uses its own keys, and is
// refused another tenant's.
func (e *env) tenantCache(t *testing.T) {
	ctx := context.Background()
	rival := e.Namespace(t, "sites-rival", map[string]string{decov1alpha1.AnnotationValkeyACL: "true"})
	admin := nodeenv.RedisClient(t, e.Valkey, e.ValkeyPassword)
	creds := map[string]map[string][]byte{}
	took := nodeenv.WaitFor(t, 60*time.Second, "valkey-acl Secrets and users", func(ctx context.Context) error {
		for _, ns := range []string{e.siteNS, rival} {
			var s corev1.Secret
			if err := e.C.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: decov1alpha1.ValkeyACLSecretName}, &s); err != nil {
				return err
			}
			user := string(s.Data[decov1alpha1.ValkeyACLUsernameKey])
			if err := admin.Do(ctx, "ACL", "GETUSER", user).Err(); err != nil {
				return fmt.Errorf("ACL GETUSER %s: %w", user, err)
			}
			creds[ns] = s.Data
		}
		return nil
	})
	user := string(creds[e.siteNS][decov1alpha1.ValkeyACLUsernameKey])
	rivalUser := string(creds[rival][decov1alpha1.ValkeyACLUsernameKey])
	t.Logf("tenant users %s and %s provisioned after %s", user, rivalUser, took.Round(time.Millisecond))
	if user != strings.TrimPrefix(e.siteNS, "sites-") || user == rivalUser {
		t.Fatalf("usernames %q (namespace %s) and %q", user, e.siteNS, rivalUser)
	}
	rivalKey := rivalUser + ":session"
	nodeenv.Must(t, admin.Set(ctx, rivalKey, "the rival's data", 0).Err(), "write the rival's key")

	labels := map[string]string{"app": "cacheprobe"}
	d := e.ProbeDeployment(e.siteNS, "--addr", e.Valkey.Addr, "--other-key", rivalKey)
	start := time.Now()
	nodeenv.Must(t, e.C.Client.Create(ctx, d), "create the probe Deployment")
	var pod corev1.Pod
	var r result.Result
	nodeenv.WaitFor(t, 60*time.Second, "the probe pod's result", func(ctx context.Context) error {
		var list corev1.PodList
		if err := e.C.Client.List(ctx, &list, client.InNamespace(e.siteNS), client.MatchingLabels(labels)); err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return fmt.Errorf("no probe pod yet")
		}
		pod = list.Items[0]
		log, err := e.PodLog(ctx, &pod)
		if err != nil {
			return fmt.Errorf("pod %s (%s) log: %w", pod.Name, pod.Status.Phase, err)
		}
		_, line, ok := strings.Cut(log, "cacheprobe ")
		if !ok {
			return fmt.Errorf("pod %s (%s) has not printed its result: %q", pod.Name, pod.Status.Phase, log)
		}
		return json.Unmarshal([]byte(strings.TrimSpace(line)), &r)
	})
	t.Logf("probe pod %s at %s answered after %s: %+v", pod.Name, pod.Status.PodIP, time.Since(start).Round(time.Millisecond), r)

	// The pod got the credentials from the Secret, by reference: the kubelet resolved them.
	if c := pod.Spec.Containers[0]; !envFromSecret(&c, decov1alpha1.ValkeyACLSecretName) || len(c.Env) != 0 {
		t.Fatalf("probe container: envFrom %+v, env %+v; want only envFrom Secret %s", c.EnvFrom, c.Env, decov1alpha1.ValkeyACLSecretName)
	}
	if r.User != user || r.Auth != "ok" || r.OwnWrite != "ok" || r.OwnRead != "written by the tenant's pod" {
		t.Fatalf("as %s, the pod got %+v; want to authenticate and use its own keys", user, r)
	}
	for what, got := range map[string]string{"GET": r.OtherRead, "SET": r.OtherWrite} {
		if !strings.HasPrefix(got, "NOPERM") {
			t.Errorf("%s of the rival's key %s by the pod: %q, want NOPERM", what, rivalKey, got)
		}
	}
	if !strings.HasPrefix(r.Anonymous, "NOAUTH") {
		t.Errorf("the pod without credentials got %q, want NOAUTH", r.Anonymous)
	}
	if v, err := admin.Get(ctx, rivalKey).Result(); err != nil || v != "the rival's data" {
		t.Errorf("the rival's key holds %q (%v)", v, err)
	}
	if v, err := admin.Get(ctx, user+":probe").Result(); err != nil || v != "written by the tenant's pod" {
		t.Errorf("the pod's own key holds %q (%v)", v, err)
	}
}
