package provision_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/tenant/rollout"
	"github.com/siteops/siteops/internal/testenv"
)

// The attacks below are made by a real tenant: a user bound to `edit` in its own namespace only,
// acting through its own client. The platform (the admin client) owns the namespaces.

// Event reasons and metrics the defences report; named as literals so each test reads what an
// operator of the cluster sees.
const (
	reasonSecretRestored     = "ValkeyACLSecretRestored"
	reasonIsolationViolation = "ValkeyACLIsolationViolation"
	metricUserErrors         = "siteops_tenant_acl_user_errors_total"
	metricViolations         = "siteops_tenant_isolation_violations"
	metricSecretsRestored    = "siteops_tenant_secrets_restored_total"
	metricSelfHealed         = "deco_operator_valkey_acl_self_healed_total"
)

// metricValue reads one series of a registered metric; ok is false when there is none.
func metricValue(name string, labels map[string]string) (v float64, ok bool) {
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, want := range labels {
				if have[k] != want {
					continue series
				}
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// editOwnSecret changes the tenant's own valkey-acl Secret through the tenant's client.
func editOwnSecret(t *testing.T, tn *testenv.Tenant, edit func(*corev1.Secret)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s corev1.Secret
		if err := tn.Client.Get(context.Background(), client.ObjectKey{Namespace: tn.Namespace, Name: decov1.ValkeyACLSecretName}, &s); err != nil {
			return err
		}
		edit(&s)
		return tn.Client.Update(context.Background(), &s)
	})
	if err != nil {
		t.Fatalf("tenant %s edits its own Secret: %v", tn.Name, err)
	}
}

func (e *env) requireAuthRefused(t *testing.T, user, pass string) {
	t.Helper()
	for _, n := range e.nodes {
		if err := auth(context.Background(), n, user, pass); err == nil {
			t.Fatalf("AUTH %s with the forged password succeeds on %s: the tenant took over another tenant's user", user, n)
		}
	}
}

// TestSecurityHijackBySecretEdit: a tenant rewrites its own Secret to name another tenant's user
// with a password of its choice (and makes it immutable). Neither the reconcile that sees the
// edit nor resync rounds may apply it: the victim keeps its password, the Secret is restored with
// a Warning, and the attacker's opt-out deletes only the attacker's own user. Each check follows
// evidence that the step it guards ran: the restore's Event and counter for the reconcile, the
// victim's user provisioned again after it was deleted for resync rounds.
func TestSecurityHijackBySecretEdit(t *testing.T) {
	e := newEnvWithPeriod(t, time.Second)
	ctx := context.Background()
	victim := e.namespace(t, "sites-a-victim", map[string]string{decov1.AnnotationValkeyACL: "true"})
	// Named so the attacker's Secret is listed after the victim's: a resync that reads Secrets
	// lets the last one win.
	vUser, vPass := e.waitSecret(t, victim, "")
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, vUser, vPass) })

	attacker := e.c.Tenant(t, "sites-z-attacker", map[string]string{decov1.AnnotationValkeyACL: "true"})
	aUser, aPass := e.waitSecret(t, attacker.Namespace, "")
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, aUser, aPass) })

	const forged = "forged-by-the-attacker"
	restoredBefore, _ := metricValue(metricSecretsRestored, nil)
	editOwnSecret(t, attacker, func(s *corev1.Secret) {
		s.Data[decov1.ValkeyACLUsernameKey] = []byte(vUser)
		s.Data[decov1.ValkeyACLPasswordKey] = []byte(forged)
		s.Immutable = ptr.To(true)
	})
	// The platform forces a resync of the attacker's namespace too.
	e.annotate(t, attacker.Namespace, map[string]*string{decov1.AnnotationValkeyACLSync: ptr.To("after-edit")})
	// The reconcile that saw the edit has run: it restored the Secret, said so and counted it.
	restored := e.waitRestored(t, attacker.Namespace, aUser, forged)
	testenv.Eventually(t, 20*time.Second, func() error {
		if err := hasEvent(e.c, attacker.Namespace, reasonSecretRestored); err != nil {
			return err
		}
		if v, _ := metricValue(metricSecretsRestored, nil); v <= restoredBefore {
			return fmt.Errorf("%s = %v, the restore was not counted", metricSecretsRestored, v)
		}
		return nil
	})
	e.requireAuthRefused(t, vUser, forged)
	if err := e.authEverywhere(ctx, vUser, vPass); err != nil {
		t.Fatalf("victim locked out after the attacker's edit: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, aUser, restored) })

	// Resync rounds must see the forged Secret, so the attacker keeps it: immutable, with a
	// finalizer of its own, the operator can neither change nor replace it. The victim's user,
	// deleted from every node, comes back only from a round; two deletions in a row make sure a
	// whole round ran, from its listing on, while the forged Secret was there.
	editOwnSecret(t, attacker, func(s *corev1.Secret) {
		s.Data[decov1.ValkeyACLUsernameKey] = []byte(vUser)
		s.Data[decov1.ValkeyACLPasswordKey] = []byte(forged)
		s.Immutable = ptr.To(true)
		s.Finalizers = append(s.Finalizers, attackerHold)
	})
	for range 2 {
		e.reprovisionedByResync(t, vUser, vPass)
	}
	if s, err := e.secret(attacker.Namespace); err != nil || string(s.Data[decov1.ValkeyACLPasswordKey]) != forged {
		t.Fatalf("the attacker's forged Secret was not in place during the resyncs (%v)", err)
	}
	e.requireAuthRefused(t, vUser, forged)
	editOwnSecret(t, attacker, func(s *corev1.Secret) {
		s.Finalizers = slices.DeleteFunc(s.Finalizers, func(f string) bool { return f == attackerHold })
	})
	restored = e.waitRestored(t, attacker.Namespace, aUser, forged)
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, aUser, restored) })

	// The attacker names the victim again, and the platform opts the attacker's namespace out:
	// only the attacker's own user may go.
	editOwnSecret(t, attacker, func(s *corev1.Secret) {
		s.Data[decov1.ValkeyACLUsernameKey] = []byte(vUser)
	})
	e.annotate(t, attacker.Namespace, map[string]*string{decov1.AnnotationValkeyACL: nil})
	testenv.Eventually(t, 20*time.Second, func() error {
		var ns corev1.Namespace
		if err := e.c.Client.Get(ctx, client.ObjectKey{Name: attacker.Namespace}, &ns); err != nil {
			return err
		}
		if slices.Contains(ns.Finalizers, provision.Finalizer) {
			return fmt.Errorf("attacker's namespace still holds the finalizer")
		}
		return nil
	})
	for _, n := range e.nodes {
		if ok, err := e.userExists(ctx, n, vUser); !ok {
			t.Fatalf("the attacker's opt-out deleted the victim's user on %s (%v)", n, err)
		}
		if ok, _ := e.userExists(ctx, n, aUser); ok {
			t.Errorf("the attacker's own user survived its opt-out on %s", n)
		}
	}
	if err := e.authEverywhere(ctx, vUser, vPass); err != nil {
		t.Fatalf("victim locked out after the attacker's opt-out: %v", err)
	}
}

// attackerHold is the finalizer a tenant puts on its own Secret so nobody can replace it.
const attackerHold = "attacker.example/hold"

// waitRestored waits until the valkey-acl Secret of ns names user again, with a password other
// than forged, is no longer immutable and is not being deleted, and returns that password.
func (e *env) waitRestored(t *testing.T, ns, user, forged string) string {
	t.Helper()
	var pass string
	testenv.Eventually(t, 20*time.Second, func() error {
		s, err := e.secret(ns)
		if err != nil {
			return err
		}
		if u := string(s.Data[decov1.ValkeyACLUsernameKey]); u != user {
			return fmt.Errorf("Secret of %s still names user %q", ns, u)
		}
		if s.Immutable != nil && *s.Immutable {
			return fmt.Errorf("Secret of %s is still immutable", ns)
		}
		if s.DeletionTimestamp != nil {
			return fmt.Errorf("Secret of %s is being deleted", ns)
		}
		pass = string(s.Data[decov1.ValkeyACLPasswordKey])
		if pass == forged || pass == "" {
			return fmt.Errorf("Secret of %s still holds the forged password", ns)
		}
		return nil
	})
	return pass
}

// reprovisionedByResync deletes user from every node and waits until a resync round has
// provisioned it again, counted as self-healed, accepting pass: evidence that a round applied
// the users after the call began, and that it applied pass for user.
func (e *env) reprovisionedByResync(t *testing.T, user, pass string) {
	t.Helper()
	ctx := context.Background()
	healed, _ := metricValue(metricSelfHealed, nil)
	for _, n := range e.nodes {
		c := e.admin(n)
		err := c.Do(ctx, "acl", "deluser", user).Err()
		_ = c.Close()
		if err != nil {
			t.Fatalf("ACL DELUSER %s on %s: %v", user, n, err)
		}
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if v, _ := metricValue(metricSelfHealed, nil); v <= healed {
			return fmt.Errorf("%s = %v: no resync round has provisioned %s again", metricSelfHealed, v, user)
		}
		return e.authEverywhere(ctx, user, pass)
	})
}

// TestSecurityImmutableSecretRestored: a tenant freezes its Secret (immutable: true), which would
// block every later rotation. The operator deletes and recreates it with the same password (no
// restart needed), and rotation keeps working.
func TestSecurityImmutableSecretRestored(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tn := e.c.Tenant(t, "sites-frozen", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, pass := e.waitSecret(t, tn.Namespace, "")
	before, _ := e.secret(tn.Namespace)
	editOwnSecret(t, tn, func(s *corev1.Secret) {
		s.Immutable = ptr.To(true)
		s.Annotations = map[string]string{"deco.sites/valkey-acl-rotated": "tenant-says-done"}
	})
	testenv.Eventually(t, 20*time.Second, func() error {
		s, err := e.secret(tn.Namespace)
		if err != nil {
			return err
		}
		if s.Immutable != nil && *s.Immutable {
			return fmt.Errorf("Secret still immutable")
		}
		if _, ok := s.Annotations["deco.sites/valkey-acl-rotated"]; ok {
			return fmt.Errorf("Secret still carries the tenant's operator annotation")
		}
		if s.UID == before.UID {
			return fmt.Errorf("Secret not recreated")
		}
		if string(s.Data[decov1.ValkeyACLPasswordKey]) != pass {
			return fmt.Errorf("restoring the Secret changed the password")
		}
		return hasEvent(e.c, tn.Namespace, reasonSecretRestored)
	})
	e.annotate(t, tn.Namespace, map[string]*string{decov1.AnnotationValkeyACLRotate: ptr.To("after-freeze")})
	_, p2 := e.waitSecret(t, tn.Namespace, pass)
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, p2) })
}

// TestSecurityBadRetiringValueIsolated: a garbage retiring value, written by the tenant on its
// Secret or found on its namespace, never stops the other tenants' users; the tenant's own user
// keeps working and the failure is counted for that namespace.
func TestSecurityBadRetiringValueIsolated(t *testing.T) {
	e := newEnvWithPeriod(t, time.Second)
	ctx := context.Background()
	good := e.namespace(t, "sites-good", map[string]string{decov1.AnnotationValkeyACL: "true"})
	gUser, gPass := e.waitSecret(t, good, "")
	tn := e.c.Tenant(t, "sites-garbage", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, pass := e.waitSecret(t, tn.Namespace, "")
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, pass) })

	const garbage = "not-a-digest ~* +@all"
	editOwnSecret(t, tn, func(s *corev1.Secret) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations["deco.sites/valkey-acl-retiring"] = garbage
	})
	testenv.Eventually(t, 20*time.Second, func() error {
		s, err := e.secret(tn.Namespace)
		if err != nil {
			return err
		}
		if v, ok := s.Annotations["deco.sites/valkey-acl-retiring"]; ok {
			return fmt.Errorf("Secret still carries the tenant's retiring value %q", v)
		}
		return nil
	})

	// The same garbage on the namespace (a platform mistake, or state left by an older version).
	errsBefore, _ := metricValue(metricUserErrors, map[string]string{"namespace": tn.Namespace})
	e.annotate(t, tn.Namespace, map[string]*string{"deco.sites/valkey-acl-retiring": ptr.To(garbage)})
	r := e.admin(e.set.Replicas[0].Addr)
	defer r.Close()
	if err := r.Do(ctx, "acl", "deluser", gUser).Err(); err != nil {
		t.Fatal(err)
	}
	// Only a resync round can bring the other tenant back: it must not wait for the bad one.
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, gUser, gPass) })
	testenv.Eventually(t, 10*time.Second, func() error {
		if v, _ := metricValue(metricUserErrors, map[string]string{"namespace": tn.Namespace}); v <= errsBefore {
			return fmt.Errorf("%s{namespace=%q} = %v, not counted", metricUserErrors, tn.Namespace, v)
		}
		return nil
	})
	s, err := e.secret(tn.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.authEverywhere(ctx, user, string(s.Data[decov1.ValkeyACLPasswordKey])); err != nil {
		t.Fatalf("the tenant with the bad value lost its user: %v", err)
	}
}

// TestSecurityOneBadUserDoesNotStopThePipeline: a user the node refuses, early in a resync of
// more users than one round trip carries, must not keep the later users from being applied.
func TestSecurityOneBadUserDoesNotStopThePipeline(t *testing.T) {
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Password: adminPassword})
	ns, err := acl.New(acl.Config{SentinelAddrs: set.SentinelAddrs(), MasterName: set.MasterName, Password: adminPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ctx := context.Background()
	users := make([]acl.User, 450)
	for i := range users {
		users[i] = acl.User{Name: fmt.Sprintf("pipe-%03d", i), Password: fmt.Sprintf("p%d", i)}
	}
	users[3].RetiredHashes = []string{"not-a-digest ~* +@all"}
	ns.Sync(ctx, "", "", users)
	c := redis.NewClient(&redis.Options{Addr: set.Master.Addr, Password: adminPassword, Protocol: 2})
	defer c.Close()
	have, err := c.Do(ctx, "acl", "users").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for i, u := range users {
		if i != 3 && !slices.Contains(have, u.Name) {
			missing = append(missing, u.Name)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("one bad user kept %d others from being applied (first: %s)", len(missing), missing[0])
	}
}

// TestSecurityIsolationProofCatchesPlantedRule: someone widens a tenant's rule directly on a
// node. The next resync's ACL DRYRUN proof reports it on the gauge and with a Warning Event on
// the namespace, and once the rule is re-applied the gauge goes back to 0.
func TestSecurityIsolationProofCatchesPlantedRule(t *testing.T) {
	e := newEnvWithPeriod(t, time.Second)
	ctx := context.Background()
	other := e.namespace(t, "sites-neighbour", map[string]string{decov1.AnnotationValkeyACL: "true"})
	e.waitSecret(t, other, "")
	tn := e.c.Tenant(t, "sites-planted", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, pass := e.waitSecret(t, tn.Namespace, "")
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, pass) })
	replica := e.set.Replicas[0].Addr
	testenv.Eventually(t, 10*time.Second, func() error {
		if v, ok := metricValue(metricViolations, map[string]string{"node": replica}); !ok || v != 0 {
			return fmt.Errorf("%s{node=%q} = %v (present %v), want 0 before the attack", metricViolations, replica, v, ok)
		}
		return nil
	})

	r := e.admin(replica)
	defer r.Close()
	if err := r.Do(ctx, "acl", "setuser", user, "+@all", "~*").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if v, _ := metricValue(metricViolations, map[string]string{"node": replica}); v <= 0 {
			return fmt.Errorf("%s{node=%q} = %v after planting +@all ~*", metricViolations, replica, v)
		}
		return hasEvent(e.c, tn.Namespace, reasonIsolationViolation)
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		if v, _ := metricValue(metricViolations, map[string]string{"node": replica}); v != 0 {
			return fmt.Errorf("%s{node=%q} = %v after the rule was re-applied", metricViolations, replica, v)
		}
		return nil
	})
	c := redis.NewClient(&redis.Options{Addr: replica, Username: user, Password: pass, Protocol: 2})
	defer c.Close()
	if err := c.Do(ctx, "keys", "*").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("KEYS after the resync: %v, want NOPERM", err)
	}
}

// TestSecurityStatefulSetRolledOnRotation: a tenant's StatefulSet reads the Secret. Rotation must
// restart it and keep the old password until it rolled out, or its pods are locked out.
func TestSecurityStatefulSetRolledOnRotation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tn := e.c.Tenant(t, "sites-stateful", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, p1 := e.waitSecret(t, tn.Namespace, "")
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: tn.Namespace, Name: "cache-reader", Annotations: map[string]string{decov1.AnnotationValkeyACLInject: "true"}},
		Spec: appsv1.StatefulSetSpec{
			ServiceName: "cache-reader",
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache-reader"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "cache-reader"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site"}}},
			},
		},
	}
	if err := tn.Client.Create(ctx, sts); err != nil {
		t.Fatalf("tenant creates a StatefulSet: %v", err)
	}
	stsRevision := func() string {
		var s appsv1.StatefulSet
		if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(sts), &s); err != nil {
			return err.Error()
		}
		return s.Spec.Template.Annotations[rollout.AnnotationRevision]
	}
	finish := func() {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var s appsv1.StatefulSet
			if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(sts), &s); err != nil {
				return err
			}
			rev := fmt.Sprintf("cache-reader-%d", s.Generation)
			s.Status = appsv1.StatefulSetStatus{ObservedGeneration: s.Generation, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1, CurrentRevision: rev, UpdateRevision: rev}
			return e.c.Client.Status().Update(ctx, &s)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	finish()

	e.annotate(t, tn.Namespace, map[string]*string{decov1.AnnotationValkeyACLRotate: ptr.To("sts-1")})
	_, p2 := e.waitSecret(t, tn.Namespace, p1)
	want := provision.Revision(acl.User{Name: user, Password: p2})
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := stsRevision(); got != want {
			return fmt.Errorf("StatefulSet not restarted for the new password: revision %q, want %q", got, want)
		}
		return nil
	})
	time.Sleep(time.Second) // several rollout polls
	if err := e.authEverywhere(ctx, user, p1); err != nil {
		t.Fatalf("old password dropped while the StatefulSet still runs old pods: %v", err)
	}
	finish()
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := auth(ctx, e.set.Master.Addr, user, p1); err == nil {
			return fmt.Errorf("old password still valid after the StatefulSet rolled out")
		}
		return nil
	})
	if err := e.authEverywhere(ctx, user, p2); err != nil {
		t.Fatal(err)
	}
}

// TestSecurityRepeatedSecretEditsStayBounded: a tenant whose workload never rolls out edits its
// Secret's password again and again. Each edit issues a new password while the previous ones stay
// valid, but their number is bounded, so the tenant cannot grow the rule every node applies.
func TestSecurityRepeatedSecretEditsStayBounded(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tn := e.c.Tenant(t, "sites-churn", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, pass := e.waitSecret(t, tn.Namespace, "")
	injectedDeployment(t, e.c, tn.Namespace) // never reports a finished rollout
	for i := range provision.MaxRetiring + 4 {
		forged := fmt.Sprintf("forged-%d", i)
		editOwnSecret(t, tn, func(s *corev1.Secret) { s.Data[decov1.ValkeyACLPasswordKey] = []byte(forged) })
		testenv.Eventually(t, 20*time.Second, func() error {
			s, err := e.secret(tn.Namespace)
			if err != nil {
				return err
			}
			if p := string(s.Data[decov1.ValkeyACLPasswordKey]); p == forged || p == pass {
				return fmt.Errorf("edit %d not restored yet", i)
			}
			pass = string(s.Data[decov1.ValkeyACLPasswordKey])
			return nil
		})
	}
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, pass) })
	var ns corev1.Namespace
	if err := e.c.Client.Get(ctx, client.ObjectKey{Name: tn.Namespace}, &ns); err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Split(ns.Annotations[provision.AnnotationRetiring], ",")); n > provision.MaxRetiring {
		t.Fatalf("%d retiring passwords after repeated edits, want at most %d", n, provision.MaxRetiring)
	}
	c := e.admin(e.set.Master.Addr)
	defer c.Close()
	rule, err := c.Do(ctx, "acl", "getuser", user).Slice()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(rule); i += 2 {
		if rule[i] == "passwords" {
			if n := len(rule[i+1].([]any)); n > provision.MaxRetiring+1 {
				t.Fatalf("the node accepts %d passwords for %s", n, user)
			}
		}
	}
}
