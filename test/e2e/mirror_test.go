package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// mirrorEdit is step 7: a GitTarget on the git remote and a WatchRule for ConfigMaps; a user
// bound to edit in the namespace changes a ConfigMap, and the commit on the remote names that
// user, from the audit event the API server posted (through the relay) to a manager pod.
func (e *env) mirrorEdit(t *testing.T) {
	ctx := context.Background()
	ns := e.Namespace(t, "team", nil)
	url, err := e.Git.CreateRepo("clusters", "main")
	nodeenv.Must(t, err, "create the mirror repository")
	bare := e.Git.RepoDir("clusters")
	e.mirrorNS, e.mirrorRepo = ns, bare

	const user = "alice"
	u, err := e.C.Env.AddUser(envtest.User{Name: user}, nil)
	nodeenv.Must(t, err, "add user")
	alice, err := client.New(u.Config(), client.Options{Scheme: e.C.Scheme})
	nodeenv.Must(t, err, "client of %s", user)
	for _, o := range []client.Object{
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user + "-edit"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		},
		&mirrorv1alpha1.GitProvider{
			ObjectMeta: metav1.ObjectMeta{Name: "remote", Namespace: ns},
			Spec: mirrorv1alpha1.GitProviderSpec{URL: url, AllowedBranches: []string{"main"},
				Committer: mirrorv1alpha1.Committer{Name: "Mirror Bot", Email: "mirror@example.com"}},
		},
		&mirrorv1alpha1.GitTarget{
			ObjectMeta: metav1.ObjectMeta{Name: "main", Namespace: ns},
			Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: corev1.LocalObjectReference{Name: "remote"}, Branch: "main",
				Path: "clusters/e2e", CommitWindow: &metav1.Duration{}},
		},
		&mirrorv1alpha1.WatchRule{
			ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: ns},
			Spec: mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "main"},
				Rules: []mirrorv1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}},
		},
	} {
		nodeenv.Must(t, e.C.Client.Create(ctx, o), "create %T %s", o, o.GetName())
	}

	// A ConfigMap made before the watch lists is committed as the cluster's state, by the
	// committer; one that reaches git shows the watch is running, so the next change is an event.
	marker := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watch-started", Namespace: ns}, Data: map[string]string{"watch": "started"}}
	nodeenv.Must(t, e.C.Client.Create(ctx, marker), "create the marker ConfigMap")
	nodeenv.WaitFor(t, 60*time.Second, "the marker ConfigMap in git", func(context.Context) error {
		return nodeenv.GitFileHas(bare, "clusters/e2e/"+ns+"/core/configmaps/watch-started.yaml", "watch: started")
	})

	file := "clusters/e2e/" + ns + "/core/configmaps/settings.yaml"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns}, Data: map[string]string{"color": "blue"}}
	start := time.Now()
	// The binding takes effect once the authorizer's informers have it.
	nodeenv.WaitFor(t, 30*time.Second, user+" creates a ConfigMap", func(ctx context.Context) error { return alice.Create(ctx, cm) })
	nodeenv.WaitFor(t, 60*time.Second, "the created ConfigMap in git", func(context.Context) error { return nodeenv.GitFileHas(bare, file, "color: blue") })
	created := time.Since(start)
	cm.Data["color"] = "green"
	start = time.Now()
	nodeenv.Must(t, alice.Update(ctx, cm), "%s updates the ConfigMap", user)
	nodeenv.WaitFor(t, 60*time.Second, "the edit in git", func(context.Context) error { return nodeenv.GitFileHas(bare, file, "color: green") })
	t.Logf("the create reached git after %s, the edit after %s", created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	log, err := nodeenv.GitOut(bare, "log", "--format=%an <%ae> | %cn | %s", "main", "--", file)
	nodeenv.Must(t, err, "git log")
	ref := "v1/configmaps/" + ns + "/settings"
	for _, want := range []string{
		"alice <alice@users.noreply.invalid> | Mirror Bot | [CREATE] " + ref,
		"alice <alice@users.noreply.invalid> | Mirror Bot | [UPDATE] " + ref,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("history of %s lacks %q:\n%s", file, want, log)
		}
	}
	// trace, given the repository, ends with that commit: its author and attribution result.
	out, err := e.siteops("trace", "configmap/settings", "-n", ns, "--repo", bare)
	if !strings.Contains(out, "by alice <alice@users.noreply.invalid>, attribution exact_user") {
		t.Errorf("trace of the edited ConfigMap (%v) does not name its last commit's author and attribution:\n%s", err, out)
	}
	t.Logf("`siteops trace configmap/settings --repo` (%v):\n%s", err, out)
}
