package controller_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/source/ghtest"
)

// requestReconcile sets the reconcile-requested-at annotation with c and returns its value.
func requestReconcile(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	value := time.Now().UTC().Format(time.RFC3339Nano)
	var df decov1.Decofile
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &df); err != nil {
		t.Fatal(err)
	}
	orig := df.DeepCopy()
	if df.Annotations == nil {
		df.Annotations = map[string]string{}
	}
	df.Annotations[decov1.AnnotationReconcileRequestedAt] = value
	if err := c.Patch(context.Background(), &df, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	return value
}

// handled waits until the Decofile's status says it handled the request value.
func (e *env) handled(t *testing.T, ns, name, value string) *decov1.Decofile {
	t.Helper()
	var df decov1.Decofile
	testenv_eventually(t, func() error {
		if err := e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &df); err != nil {
			return err
		}
		if df.Status.LastHandledReconcileAt != value {
			return errorf("lastHandledReconcileAt %q, want %q", df.Status.LastHandledReconcileAt, value)
		}
		return nil
	})
	return &df
}

// The tenant asks for a reconcile with the annotation: the branch is re-resolved at once
// (the interval is an hour), and the status says which request it handled, also when nothing
// changed and when the commit is one that already failed.
func TestReconcileRequestedAtAsTenant(t *testing.T) {
	e := start(t)
	tenant := e.c.Tenant(t, "reconcile", nil)
	ns := tenant.Namespace
	org, repo := "acme", "reconcile-"+ns
	sha1 := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{"v":1}`})
	if err := tenant.Client.Create(context.Background(), longPolled(githubDecofile(ns, org, repo, "main", ""))); err != nil {
		t.Fatal(err)
	}
	e.atCommit(t, ns, "site", sha1)

	sha2 := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{"v":2}`})
	v1 := requestReconcile(t, tenant.Client, ns, "site")
	df := e.handled(t, ns, "site", v1)
	if df.Status.GitHubCommit != sha2 || ready(df).Status != metav1.ConditionTrue {
		t.Fatalf("after the request: commit %s, Ready %+v; want %s", df.Status.GitHubCommit, ready(df), sha2)
	}

	// Nothing changed: re-resolved, not downloaded again.
	resolves, archives := e.gh.CountRepo(org, repo, ghtest.KindResolve), e.gh.CountRepo(org, repo, ghtest.KindArchive)
	v2 := requestReconcile(t, tenant.Client, ns, "site")
	e.handled(t, ns, "site", v2)
	if n := e.gh.CountRepo(org, repo, ghtest.KindResolve); n <= resolves {
		t.Fatal("the requested reconcile did not re-resolve the branch")
	}
	if n := e.gh.CountRepo(org, repo, ghtest.KindArchive); n != archives {
		t.Fatalf("an unchanged commit was downloaded again (%d archives)", n-archives)
	}

	// A commit that failed for good is not fetched again, and the request is still answered.
	bad := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{not json`})
	v3 := requestReconcile(t, tenant.Client, ns, "site")
	e.handled(t, ns, "site", v3)
	e.waitReady(t, ns, "site", metav1.ConditionFalse, source.ReasonInvalidContent, nil)
	archives = e.gh.CountRepo(org, repo, ghtest.KindArchive)
	v4 := requestReconcile(t, tenant.Client, ns, "site")
	df = e.handled(t, ns, "site", v4)
	if n := e.gh.CountRepo(org, repo, ghtest.KindArchive); n != archives {
		t.Fatalf("the rejected commit %s was downloaded again", bad)
	}
	if df.Status.GitHubCommit != sha2 {
		t.Fatalf("status names commit %s, want the stored %s", df.Status.GitHubCommit, sha2)
	}
}

// decofileReads records the package manager's GET requests of single Decofiles: path and
// resourceVersion parameter.
var decofileReads readLog

type readLog struct {
	mu    sync.Mutex
	reads []decofileRead
}

type decofileRead struct{ path, resourceVersion string }

func (l *readLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/decofiles/") && req.URL.Query().Get("watch") == "" {
			l.mu.Lock()
			l.reads = append(l.reads, decofileRead{path: req.URL.Path, resourceVersion: req.URL.Query().Get("resourceVersion")})
			l.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// of returns the reads of the Decofile ns/name so far.
func (l *readLog) of(ns, name string) []decofileRead {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []decofileRead
	for _, r := range l.reads {
		if strings.HasSuffix(r.path, "/namespaces/"+ns+"/decofiles/"+name) {
			out = append(out, r)
		}
	}
	return out
}

// A reconcile reads the whole Decofile from the API server's watch cache (a resourceVersion
// given), not from etcd, and, right after its own status write, does not decide on an older
// copy: a second requested reconcile leaves the stored content and its timestamp alone.
func TestDecofileReadFromWatchCache(t *testing.T) {
	e := start(t)
	tenant := e.c.Tenant(t, "watchread", nil)
	ns := tenant.Namespace
	df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"pages/home": `{"title":"home"}`})}}
	if err := tenant.Client.Create(context.Background(), df); err != nil {
		t.Fatal(err)
	}
	first := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	for range 2 {
		e.handled(t, ns, "site", requestReconcile(t, tenant.Client, ns, "site"))
	}
	reads := decofileReads.of(ns, "site")
	if len(reads) < 3 {
		t.Fatalf("%d reads of the Decofile for 3 reconciles", len(reads))
	}
	for _, r := range reads {
		if r.resourceVersion == "" {
			t.Errorf("the Decofile was read from etcd (no resourceVersion): %+v of %+v", r, reads)
		}
	}
	if got := e.get(t, ns, "site"); got.Status.Timestamp != first.Status.Timestamp || got.Status.StoredHash != first.Status.StoredHash {
		t.Errorf("a requested reconcile rewrote the content: timestamp %d → %d", first.Status.Timestamp, got.Status.Timestamp)
	}
}
