package mirror_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/commitrequest"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestCommitRequestCommitsAsSubmitter runs the whole mirror part with its CommitRequest webhook
// served to a real API server: the webhook records the submitter, and a change waiting in an
// hour-long window is pushed when the request closes it. Without author attribution the change
// has no recorded author, so it is not credited to the submitter: it is committed by the
// committer with its usual message, and the request reports NothingPending for its author.
func TestCommitRequestCommitsAsSubmitter(t *testing.T) {
	port, err := servers.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	vwc := commitrequest.WebhookConfiguration(commitrequest.URLClientConfig("https://127.0.0.1:"+strconv.Itoa(port), nil))
	// The webhook accepts only the API server, which presents its admission client certificate.
	certs, admission := admissionClient(t, "127.0.0.1:"+strconv.Itoa(port))
	c := testenv.NewAPIServer(t, servers.APIServerOptions{Webhooks: envtest.WebhookInstallOptions{
		LocalServingHost: "127.0.0.1", LocalServingPort: port,
		ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{vwc},
	}, Configure: admission.Configure})
	redis := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	eng := runWebhookManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "cmd", CommitRequestWebhook: true,
		CommitRequestWebhookClientCA: certs.CAFile, CommitRequestWebhookClientNames: []string{"kube-apiserver"}})

	target := hourWindowSite(t, f, eng)
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}, Data: map[string]string{"color": "blue"}})
	testenv.Eventually(t, 30*time.Second, func() error {
		if st, _ := eng.Status(target); st.Writer.Pending == 0 {
			return fmt.Errorf("the change is not pending in the writer yet")
		}
		return nil
	})
	if err := c.UserClient(t, "alice", "system:masters").Create(context.Background(), &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "release"},
		Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Message: "Release 1: new landing page"}}); err != nil {
		t.Fatal(err)
	}
	cr := waitRequest(t, f, "release", mirrorv1alpha1.ReasonNothingPending)
	if cr.Status.Commit != "" || cr.Status.Author != "alice <alice@users.noreply.invalid>" {
		t.Fatalf("status = %+v", cr.Status)
	}
	if a := meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionAuthorAttributed); a == nil || a.Status != metav1.ConditionTrue || a.Reason != mirrorv1alpha1.ReasonCommandAuthor {
		t.Fatalf("AuthorAttributed = %+v", a)
	}
	if got := f.git(t, "log", "-1", "--format=%an | %cn | %s", "main"); got != "Mirror Bot | Mirror Bot | [CREATE] v1/configmaps/"+f.ns+"/app" {
		t.Fatalf("commit = %q", got)
	}
	if files := f.git(t, "show", "--format=", "--name-only", "main"); files != "site/"+f.ns+"/core/configmaps/app.yaml" {
		t.Fatalf("commit files = %q", files)
	}
}

// TestCommitRequestWithoutWebhook: with no submitter recorded the committer authors the commit,
// and the request says so.
func TestCommitRequestWithoutWebhook(t *testing.T) {
	c := testenv.APIServer(t)
	redis := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	eng, _ := runManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "nocmd"}, "")
	t.Cleanup(func() {
		_ = c.Client.DeleteAllOf(context.Background(), &mirrorv1alpha1.CommitRequest{}, client.InNamespace(f.ns))
	})

	cr := closeWithRequest(t, f, eng, c.UserClient(t, "carol", "system:masters"), "Release 2")
	a := meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionAuthorAttributed)
	if a == nil || a.Status != metav1.ConditionFalse || a.Reason != mirrorv1alpha1.ReasonCommitterFallback {
		t.Fatalf("AuthorAttributed = %+v", a)
	}
	if got := f.git(t, "log", "-1", "--format=%H | %an <%ae> | %B", "main"); got != cr.Status.Commit+" | Mirror Bot <mirror@example.com> | Release 2\n\nAttribution: absent\nCommit-Request: "+string(cr.UID) {
		t.Fatalf("commit = %q, status %+v", got, cr.Status)
	}

	// Nothing pending: no empty commit, the request says so.
	before := f.commits()
	empty := &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "empty"},
		Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Message: "nothing"}}
	f.create(t, empty)
	got := waitRequest(t, f, "empty", mirrorv1alpha1.ReasonNothingPending)
	if got.Status.Commit != "" || f.commits() != before {
		t.Fatalf("an empty window made a commit: %+v, %d commits (was %d)", got.Status, f.commits(), before)
	}

	// A GitTarget the engine does not run: the request says so and is retried.
	f.create(t, &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "lost"},
		Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "missing"}, Message: "m"}})
	testenv.Eventually(t, 30*time.Second, func() error {
		var cr mirrorv1alpha1.CommitRequest
		if err := f.c.Client.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: "lost"}, &cr); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted); c == nil || c.Status != metav1.ConditionFalse || c.Reason != mirrorv1alpha1.ReasonTargetNotFound {
			return fmt.Errorf("Committed = %+v", c)
		}
		return nil
	})
}

// closeWithRequest mirrors a ConfigMap into an hour-long window of GitTarget "site", waits until
// the writer holds it, and has user close the window with a CommitRequest.
func closeWithRequest(t *testing.T, f *fixture, eng *engine.Engine, user client.Client, message string) *mirrorv1alpha1.CommitRequest {
	t.Helper()
	target := hourWindowSite(t, f, eng)
	before := f.commits()
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}, Data: map[string]string{"color": "blue"}})
	testenv.Eventually(t, 30*time.Second, func() error {
		if st, _ := eng.Status(target); st.Writer.Pending == 0 {
			return fmt.Errorf("the change is not pending in the writer yet")
		}
		return nil
	})
	if n := f.commits(); n != before {
		t.Fatalf("the window closed on its own: %d commits, was %d", n, before)
	}
	cr := &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "release"},
		Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Message: message}}
	if err := user.Create(context.Background(), cr); err != nil {
		t.Fatal(err)
	}
	got := waitRequest(t, f, "release", mirrorv1alpha1.ReasonPushed)
	if !strings.Contains(f.file("site/"+f.ns+"/core/configmaps/app.yaml"), "blue") {
		t.Fatal("the pending change is not on the branch")
	}
	return got
}

func waitRequest(t *testing.T, f *fixture, name, reason string) *mirrorv1alpha1.CommitRequest {
	t.Helper()
	var cr mirrorv1alpha1.CommitRequest
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := f.c.Client.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: name}, &cr); err != nil {
			return err
		}
		c := meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
			return fmt.Errorf("Committed = %+v", c)
		}
		return nil
	})
	return &cr
}

// TestCommitRequestAfterAttributedChange: with author attribution on, a change waits for its
// audit fact before it reaches the writer; a CommitRequest made right after the change still
// commits it, authored by the submitter who made it.
func TestCommitRequestAfterAttributedChange(t *testing.T) {
	rcv := newAuditReceiver(t, "prod")
	hookPort, err := servers.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	vwc := commitrequest.WebhookConfiguration(commitrequest.URLClientConfig("https://127.0.0.1:"+strconv.Itoa(hookPort), nil))
	hookCerts, admission := admissionClient(t, "127.0.0.1:"+strconv.Itoa(hookPort))
	c := testenv.NewAPIServer(t, servers.APIServerOptions{
		Webhooks: envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1", LocalServingPort: hookPort,
			ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{vwc}},
		Configure: func(env *envtest.Environment) { rcv.webhook.Configure(env); admission.Configure(env) },
	})
	redis := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	eng := runWebhookManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "cmdattr", CommitRequestWebhook: true,
		CommitRequestWebhookClientCA: hookCerts.CAFile, CommitRequestWebhookClientNames: []string{"kube-apiserver"},
		Attribution: rcv.options(4 * time.Second)})

	hourWindowSite(t, f, eng)
	ctx := context.Background()
	dave := c.UserClient(t, "dave", "system:masters")
	if err := dave.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}, Data: map[string]string{"color": "red"}}); err != nil {
		t.Fatal(err)
	}
	// At once: the change's audit fact is still in the API server's batch.
	if err := dave.Create(ctx, &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "release"},
		Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Message: "Release 3"}}); err != nil {
		t.Fatal(err)
	}
	cr := waitRequest(t, f, "release", mirrorv1alpha1.ReasonPushed)
	if got := f.git(t, "log", "-1", "--format=%H | %an | %s | %(trailers:key=Attribution,valueonly)", "main"); got != cr.Status.Commit+" | dave | Release 3 | exact_user" {
		t.Fatalf("commit = %q, status %+v", got, cr.Status)
	}
	if files := f.git(t, "show", "--format=", "--name-only", "main"); files != "site/"+f.ns+"/core/configmaps/app.yaml" {
		t.Fatalf("commit files = %q", files)
	}
}

// hourWindowSite makes GitTarget "site" with an hour-long commit window and a rule mirroring
// ConfigMaps into it, and waits until its streams run.
func hourWindowSite(t *testing.T, f *fixture, eng *engine.Engine) types.NamespacedName {
	t.Helper()
	f.target(t, "site", "site", time.Hour, "")
	f.watchRule(t, "cms", "site", cmRule())
	target := types.NamespacedName{Namespace: f.ns, Name: "site"}
	testenv.Eventually(t, 30*time.Second, func() error {
		if st, ok := eng.Status(target); !ok || st.Streams == 0 {
			return fmt.Errorf("target not running: %+v", st)
		}
		return nil
	})
	return target
}
