package controller_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/push"
	"github.com/siteops/siteops/internal/shard"
	"github.com/siteops/siteops/internal/testenv"
)

// Settings of the package manager's push receiver.
const (
	pushSecret          = "push-secret"
	pushMaxPerNamespace = 2
	// longInterval is longer than any test: a change that arrives was brought by a push or a
	// reconcile request, never by polling.
	longInterval = time.Hour
)

// startPush adds a push receiver on a loopback port to mgr and returns the trigger for the
// delivery controller and the receiver's URL.
func startPush(t *testing.T, mgr ctrl.Manager) (*controller.PushTrigger, string) {
	t.Helper()
	trigger, err := controller.NewPushTrigger(context.Background(), mgr, pushMaxPerNamespace, shard.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := push.NewReceiver(push.Config{Listener: l, Secret: []byte(pushSecret), Trigger: trigger, Rate: 1000, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(rcv); err != nil {
		t.Fatal(err)
	}
	return trigger, "http://" + l.Addr().String() + push.Path
}

// sendGitHubPush posts a signed GitHub push event for org/repo's branch and returns the status.
func (e *env) sendGitHubPush(t *testing.T, org, repo, branch, after string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"ref": "refs/heads/" + branch, "after": after,
		"repository": map[string]any{"full_name": org + "/" + repo, "clone_url": "https://github.com/" + org + "/" + repo + ".git"},
	})
	req, _ := http.NewRequest(http.MethodPost, e.pushURL, bytes.NewReader(body))
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", "d-"+after)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(push.Sign(body, []byte(pushSecret))))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func longPolled(df *decov1.Decofile) *decov1.Decofile {
	df.Spec.Interval = &metav1.Duration{Duration: longInterval}
	return df
}

// atCommit waits until the Decofile is Ready at sha.
func (e *env) atCommit(t *testing.T, ns, name, sha string) *decov1.Decofile {
	t.Helper()
	return e.waitReady(t, ns, name, metav1.ConditionTrue, "", func(d *decov1.Decofile) error {
		if d.Status.GitHubCommit != sha {
			return errorf("at %s, want %s", d.Status.GitHubCommit, sha)
		}
		return nil
	})
}

// A push delivers the new commit at once although the Decofile polls only every hour.
func TestPushReconcilesAtOnce(t *testing.T) {
	e := start(t)
	tenant := e.c.Tenant(t, "push", nil)
	ns := tenant.Namespace
	org, repo := "acme", "push-"+ns
	sha1 := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{"v":1}`})
	if err := tenant.Client.Create(context.Background(), longPolled(githubDecofile(ns, org, repo, "main", ""))); err != nil {
		t.Fatal(err)
	}
	e.atCommit(t, ns, "site", sha1)

	sha2 := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{"v":2}`})
	sent := time.Now()
	if code := e.sendGitHubPush(t, org, repo, "main", sha2); code != http.StatusAccepted {
		t.Fatalf("push event: HTTP %d", code)
	}
	df := e.atCommit(t, ns, "site", sha2)
	t.Logf("push event to commit stored: %s (interval %s)", time.Since(sent).Round(time.Millisecond), longInterval)
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != `{"a":{"v":2}}` {
		t.Fatalf("ConfigMap holds %s", got)
	}
	if df.Status.LastUpdated == nil || df.Status.LastUpdated.Time.Before(sent.Add(-time.Second)) {
		t.Fatalf("lastUpdated %v, before the push at %v", df.Status.LastUpdated, sent)
	}
}

// The index finds exactly the Decofiles following the pushed repository and branch: not other
// branches, pinned SHAs or inline content; an unknown repository finds none.
func TestPushFindsFollowersByIndex(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "pushidx", nil)
	org, repo := "acme", "idx-"+ns
	sha := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `1`})
	e.gh.Push(org, repo, "release", map[string]string{".deco/blocks/a.json": `2`})
	for name, df := range map[string]*decov1.Decofile{
		"main":    githubDecofile(ns, org, repo, "main", ""),
		"heads":   githubDecofile(ns, org, repo, "refs/heads/main", ""),
		"release": githubDecofile(ns, org, repo, "release", ""),
		"pinned":  githubDecofile(ns, org, repo, sha, ""),
		"inline":  {Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"a": `1`})}},
		"git": {Spec: decov1.DecofileSpec{Source: decov1.SourceGit,
			Git: &decov1.GitSource{URL: "https://192.0.2.1/" + strings.ToUpper(org) + "/" + repo + ".git", Ref: "refs/heads/main"}}},
	} {
		df.Name, df.Namespace = name, ns
		longPolled(df)
		e.create(t, df)
	}
	keys := []string{push.GitHubKey(org, repo, "main"), push.GitKey("192.0.2.1/"+org+"/"+repo, "main")}
	testenv.Eventually(t, waitFor, func() error {
		var list decov1.DecofileList
		if err := e.c.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) != 6 {
			return errorf("%d Decofiles", len(list.Items))
		}
		return nil
	})
	trigger := e.trigger(t)
	testenv.Eventually(t, waitFor, func() error {
		if n, err := trigger.Trigger(context.Background(), keys[:1]); err != nil || n != 2 {
			return errorf("github key: %d Decofiles (%v), want main and heads", n, err)
		}
		if n, err := trigger.Trigger(context.Background(), keys[1:]); err != nil || n != 1 {
			return errorf("git key: %d Decofiles (%v), want git", n, err)
		}
		return nil
	})
	if n, err := trigger.Trigger(context.Background(), []string{push.GitHubKey("nobody", "nothing", "main")}); err != nil || n != 0 {
		t.Fatalf("unknown repository: %d Decofiles (%v)", n, err)
	}
	if code := e.sendGitHubPush(t, "nobody", "nothing-"+ns, "main", "f00"); code != http.StatusAccepted {
		t.Fatalf("unknown repository: HTTP %d, want 202", code)
	}
}

// A tenant makes many Decofiles follow a busy repository that another tenant also follows: one
// push reconciles at most pushMaxPerNamespace of the tenant's, and the other tenant's Decofile
// is delivered at once all the same.
func TestPushPerNamespaceBoundAsTenant(t *testing.T) {
	e := start(t)
	attacker := e.c.Tenant(t, "pushflood", nil)
	victim := e.c.Tenant(t, "pushvictim", nil)
	org, repo := "acme", "busy-"+attacker.Namespace
	sha1 := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{"v":1}`})
	names := []string{"f1", "f2", "f3", "f4"}
	for _, n := range names {
		df := longPolled(githubDecofile(attacker.Namespace, org, repo, "main", ""))
		df.Name = n
		if err := attacker.Client.Create(context.Background(), df); err != nil {
			t.Fatal(err)
		}
	}
	if err := victim.Client.Create(context.Background(), longPolled(githubDecofile(victim.Namespace, org, repo, "main", ""))); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		e.atCommit(t, attacker.Namespace, n, sha1)
	}
	e.atCommit(t, victim.Namespace, "site", sha1)

	n, err := e.trigger(t).Trigger(context.Background(), []string{push.GitHubKey(org, repo, "main")})
	if err != nil || n != pushMaxPerNamespace+1 {
		t.Fatalf("one push reconciles %d Decofiles (%v), want %d of the tenant's and the victim's", n, err, pushMaxPerNamespace)
	}
	sha2 := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{"v":2}`})
	if code := e.sendGitHubPush(t, org, repo, "main", sha2); code != http.StatusAccepted {
		t.Fatalf("push event: HTTP %d", code)
	}
	e.atCommit(t, victim.Namespace, "site", sha2)
}

// A replica that is not the leader passes a push on through the reconcile-requested-at
// annotation; the leader handles it.
func TestPushOnAReplicaThatIsNotTheLeader(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "pushreplica", nil)
	org, repo := "acme", "replica-"+ns
	sha1 := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{"v":1}`})
	e.create(t, longPolled(githubDecofile(ns, org, repo, "main", "")))
	e.atCommit(t, ns, "site", sha1)

	// Another replica: its leader election Lease is held by someone else for an hour.
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "replica-lease", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("the-leader"), LeaseDurationSeconds: ptr.To(int32(3600)),
			AcquireTime: &metav1.MicroTime{Time: time.Now()}, RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	e.create(t, lease)
	replica, err := ctrl.NewManager(e.c.Config, ctrl.Options{
		Scheme: e.c.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		LeaderElection: true, LeaderElectionID: lease.Name, LeaderElectionNamespace: ns,
	})
	if err != nil {
		t.Fatal(err)
	}
	trigger, err := controller.NewPushTrigger(context.Background(), replica, 0, shard.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, replica)
	select {
	case <-replica.Elected():
		t.Fatal("the replica became leader")
	default:
	}

	e.passedOn(t, trigger, ns, org, repo)
}

// A push reaching the leader of another shard (one that does not reconcile the Decofile) is
// passed on through the reconcile-requested-at annotation, to the instance that does; the
// shard's leader never queues it for a controller of its own.
func TestPushOnTheLeaderOfAnotherShard(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "pushshard", nil)
	org, repo := "acme", "shard-"+ns
	sha1 := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{"v":1}`})
	e.create(t, longPolled(githubDecofile(ns, org, repo, "main", "")))
	e.atCommit(t, ns, "site", sha1)

	other, err := shard.Parse(shard.ForShard("other"))
	if err != nil {
		t.Fatal(err)
	}
	// Elected at once (no leader election), and no controller drains its trigger's queue.
	leader, err := ctrl.NewManager(e.c.Config, ctrl.Options{
		Scheme: e.c.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	trigger, err := controller.NewPushTrigger(context.Background(), leader, 0, other)
	if err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, leader)
	<-leader.Elected()

	e.passedOn(t, trigger, ns, org, repo)
}

// passedOn pushes a new commit to org/repo, has trigger (of an instance that does not reconcile
// the Decofile "site" of ns) take the push event, and waits until the instance that does has
// delivered the commit, asked through the reconcile-requested-at annotation.
func (e *env) passedOn(t *testing.T, trigger *controller.PushTrigger, ns, org, repo string) {
	t.Helper()
	sha2 := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{"v":2}`})
	testenv.Eventually(t, waitFor, func() error {
		n, err := trigger.Trigger(context.Background(), []string{push.GitHubKey(org, repo, "main")})
		if err != nil || n != 1 {
			return errorf("%d Decofiles (%v)", n, err)
		}
		return nil
	})
	df := e.atCommit(t, ns, "site", sha2)
	if v := df.Annotations[decov1.AnnotationReconcileRequestedAt]; v == "" || df.Status.LastHandledReconcileAt != v {
		t.Fatalf("annotation %q, lastHandledReconcileAt %q", v, df.Status.LastHandledReconcileAt)
	}
}
