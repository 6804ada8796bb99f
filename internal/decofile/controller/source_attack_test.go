package controller_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/source/ghtest"
	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// Loopback addresses of the URL policy tests: the package's manager allows the first (as a
// platform would allow its own git host) and nothing else on loopback but 127.0.0.1, where the
// package's stand-in servers run.
const (
	allowedGitHost = "127.0.3.7"
	refusedGitHost = "127.0.3.8"
)

// testEgress is the source URL policy of the package's manager: plain HTTP to the stand-in
// servers on 127.0.0.1 and to allowedGitHost, nothing else private.
var testEgress = egress.MustNew(egress.Config{
	Schemes:  []string{"http", "https"},
	Hosts:    []string{"127.0.0.1", allowedGitHost},
	Settings: source.EgressSettings,
})

// managerLogs holds everything the package's manager logs, so tests can check what reached it.
var managerLogs logSink

type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		fmt.Fprintln(&s.buf, prefix, args)
	}, funcr.Options{Verbosity: 10})
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func uniqueMarker() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "MARKER-" + hex.EncodeToString(b)
}

// internalAdmin is an internal service on 127.0.0.1 that answers 404 with mark in its body.
func internalAdmin(t *testing.T, mark string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "no such page; internal token "+mark)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

func gitDecofile(ns, name, url string) *decov1.Decofile {
	return &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Git: &decov1.GitSource{URL: url, Ref: "main", Path: "blocks"}}}
}

// assertNowhere checks that text is in no Decofile status, Event or manager log line of ns.
func (e *env) assertNowhere(t *testing.T, ns, text string) {
	t.Helper()
	ctx := context.Background()
	var dfs decov1.DecofileList
	if err := e.c.Client.List(ctx, &dfs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, df := range dfs.Items {
		raw, _ := json.Marshal(df.Status)
		if strings.Contains(string(raw), text) {
			t.Errorf("Decofile %s status holds %q: %s", df.Name, text, raw)
		}
	}
	var evs eventsv1.EventList
	if err := e.c.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var core corev1.EventList
	if err := e.c.Client.List(ctx, &core, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if strings.Contains(ev.Note, text) {
			t.Errorf("Event %s/%s holds %q: %s", ev.Reason, ev.Name, text, ev.Note)
		}
	}
	for _, ev := range core.Items {
		if strings.Contains(ev.Message, text) {
			t.Errorf("Event %s/%s holds %q: %s", ev.Reason, ev.Name, text, ev.Message)
		}
	}
	if strings.Contains(managerLogs.String(), text) {
		t.Errorf("the manager logged %q", text)
	}
}

// TestSSRFReadBackAsTenant: a tenant points a git Decofile at an internal HTTP service the
// platform allows; the service's answer never comes back to the tenant, in status or Events,
// nor goes to the manager's logs. The status says the HTTP status and what to check.
func TestSSRFReadBackAsTenant(t *testing.T) {
	e := start(t)
	tenant := e.c.Tenant(t, "ssrf", nil)
	mark := uniqueMarker()
	base := internalAdmin(t, mark)
	if err := tenant.Client.Create(context.Background(), gitDecofile(tenant.Namespace, "site", base+"/internal/admin")); err != nil {
		t.Fatal(err)
	}
	df := e.waitReady(t, tenant.Namespace, "site", metav1.ConditionFalse, source.ReasonNotFound, nil)
	e.hasEvent(t, tenant.Namespace, "site", corev1.EventTypeWarning, source.ReasonNotFound, "")
	e.assertNowhere(t, tenant.Namespace, mark)
	if msg := ready(df).Message; !strings.Contains(msg, "HTTP 404") || !strings.Contains(msg, "spec.git.url") {
		t.Errorf("the message does not say the HTTP status and what to check: %s", msg)
	}
}

// TestLoopbackRemoteRefusedAsTenant: a git URL on a loopback address the platform did not allow
// is refused before anything is sent, naming the setting; the same remote on an allowed address
// is delivered.
func TestLoopbackRemoteRefusedAsTenant(t *testing.T) {
	e := start(t)
	tenant := e.c.Tenant(t, "loopback", nil)
	ctx := context.Background()
	var urls []string
	for _, host := range []string{refusedGitHost, allowedGitHost} {
		remote := testenv.GitRemote(t, servers.GitRemoteOptions{Host: host})
		url, err := remote.CreateRepo("site", "main")
		if err != nil {
			t.Fatal(err)
		}
		work := t.TempDir()
		testenv.Git(t, work, "init", "-q", "-b", "main")
		testenv.CommitFiles(t, work, "content", map[string]string{"blocks/a.json": `{"v":1}`})
		testenv.Git(t, work, "push", "-q", url, "main")
		urls = append(urls, url)
	}
	if err := tenant.Client.Create(ctx, gitDecofile(tenant.Namespace, "refused", urls[0])); err != nil {
		t.Fatal(err)
	}
	df := e.waitReady(t, tenant.Namespace, "refused", metav1.ConditionFalse, source.ReasonNotAllowed, nil)
	for _, m := range []string{"loopback", refusedGitHost, "--source-allowed-hosts"} {
		if !strings.Contains(ready(df).Message, m) {
			t.Errorf("message %q does not mention %q", ready(df).Message, m)
		}
	}
	e.hasEvent(t, tenant.Namespace, "refused", corev1.EventTypeWarning, source.ReasonNotAllowed, "--source-allowed-hosts")

	if err := tenant.Client.Create(ctx, gitDecofile(tenant.Namespace, "allowed", urls[1])); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, tenant.Namespace, "allowed", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
}

// TestCrossTenantPrivateRepoNeedsGrant: the operator's GitHub token reads private repositories
// of an allowed org; a tenant gets it only for the repositories the platform granted its
// namespace (Namespace annotation), so it cannot read another tenant's private repository.
func TestCrossTenantPrivateRepoNeedsGrant(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	victimRepo := "victim-" + uniqueMarker()[7:15]
	e.gh.Private(allowedOrg, victimRepo, fallbackToken)
	e.gh.Push(allowedOrg, victimRepo, "main", map[string]string{".deco/blocks/secret.json": `{"private":true}`})

	attacker := e.c.Tenant(t, "attacker", map[string]string{source.AnnotationGitHubRepos: allowedOrg + "/attacker-site"})
	if err := attacker.Client.Create(ctx, githubDecofile(attacker.Namespace, allowedOrg, victimRepo, "main", "")); err != nil {
		t.Fatal(err)
	}
	df := e.waitReady(t, attacker.Namespace, "site", metav1.ConditionFalse, source.ReasonNotFound, nil)
	for _, m := range []string{"spec.github.secret", source.AnnotationGitHubRepos} {
		if !strings.Contains(ready(df).Message, m) {
			t.Errorf("message %q does not mention %q", ready(df).Message, m)
		}
	}
	for _, a := range e.gh.RepoAuthorizations(allowedOrg, victimRepo, ghtest.KindResolve) {
		if a != "" {
			t.Fatalf("the operator's token was sent for a repository not granted to the namespace: %q", a)
		}
	}

	owner := e.c.Tenant(t, "owner", map[string]string{source.AnnotationGitHubRepos: allowedOrg + "/" + victimRepo})
	if err := owner.Client.Create(ctx, githubDecofile(owner.Namespace, allowedOrg, victimRepo, "main", "")); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, owner.Namespace, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	if got := e.configMap(t, owner.Namespace, "site").Data[decov1.KeyJSON]; got != `{"secret":{"private":true}}` {
		t.Fatalf("granted namespace got %s", got)
	}
}
