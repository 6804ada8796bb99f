package attribution_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

type commit struct {
	author, email, committer string
	subject, body            string
}

// gitLog reads the branch's history from the bare repository, oldest first.
func gitLog(dir, branch string) ([]commit, error) {
	out, err := exec.Command("git", "-C", dir, "log", "--reverse", "--format=%an%x1f%ae%x1f%cn%x1f%s%x1f%b%x1e", branch).Output()
	if err != nil {
		return nil, err
	}
	var cs []commit
	for _, rec := range strings.Split(string(out), "\x1e") {
		f := strings.Split(strings.TrimSpace(rec), "\x1f")
		if len(f) < 5 {
			continue
		}
		cs = append(cs, commit{f[0], f[1], f[2], f[3], f[4]})
	}
	return cs, nil
}

// TestMirrorCommitsByAuthor runs the mirror engine (watch streams and git writers, pushing to a
// real git remote) with the resolver as its StreamHook, against an API server whose audit
// webhook feeds the receiver: every commit names the user or service account who made the
// change, and the committer is always the provider's.
func TestMirrorCommitsByAuthor(t *testing.T) {
	ac := startAuditedCluster(t, "prod")
	ctx := context.Background()
	ns := ac.c.Namespace(t, "mirror", nil)
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	perChange, err := remote.CreateRepo("per-change", "main")
	if err != nil {
		t.Fatal(err)
	}
	windowed, err := remote.CreateRepo("windowed", "main")
	if err != nil {
		t.Fatal(err)
	}

	r := ac.resolver(t, attribution.Config{Route: "prod", Grace: 4 * time.Second})
	eng := engine.New(dynamic.NewForConfigOrDie(ac.c.Config), nil)
	eng.StreamHook = r.ConfigureStream
	// The test remotes serve plain HTTP on loopback: allowed explicitly.
	local := egress.MustNew(egress.Config{Schemes: []string{"https", "ssh", "http"}, Hosts: []string{"127.0.0.0/8"}})
	eng.WriterHook = func(cfg *gitwriter.Config) { cfg.Egress = local }
	ectx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Start(ectx) }()
	t.Cleanup(func() { cancel(); <-done })

	committer := gitwriter.Signature{Name: "Mirror Bot", Email: "mirror@example.com"}
	spec := func(uid, url string, window time.Duration) engine.TargetSpec {
		return engine.TargetSpec{
			UID: uid, Path: "cluster",
			Writer:  engine.WriterSpec{URL: url, Branch: "main", Committer: committer, Window: window},
			Streams: []engine.StreamSpec{{GVR: configmaps, Namespace: ns}},
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		return eng.Apply(types.NamespacedName{Namespace: ns, Name: "per-change"}, spec("t1", perChange, 0))
	})
	if err := eng.Apply(types.NamespacedName{Namespace: ns, Name: "windowed"}, spec("t2", windowed, 1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// A sentinel object shows the watches are running before the users start: changes made
	// before would arrive as a replay (state, committed by the committer).
	sentinel := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sentinel"}}
	if err := ac.c.Client.Create(ctx, sentinel); err != nil {
		t.Fatal(err)
	}
	for _, repo := range []string{"per-change", "windowed"} {
		testenv.Eventually(t, 20*time.Second, func() error {
			cs, err := gitLog(remote.RepoDir(repo), "main")
			if err != nil || len(cs) == 0 {
				return fmt.Errorf("%s: sentinel not committed yet: %w", repo, err)
			}
			return nil
		})
	}

	alice, _ := client.New(ac.userConfig(t, "alice"), client.Options{Scheme: ac.c.Scheme})
	bob, _ := client.New(ac.userConfig(t, "bob"), client.Options{Scheme: ac.c.Scheme})
	robot, _ := client.New(ac.serviceAccountConfig(t, ns, "deployer"), client.Options{Scheme: ac.c.Scheme})
	mk := func(c client.Client, name string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"set": name[:1]}}, Data: map[string]string{"k": name}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	a := mk(alice, "a")
	mk(alice, "a2")
	b := mk(bob, "b")
	mk(robot, "s")
	a.Data["k"] = "by bob"
	if err := bob.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := alice.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	// erin removes alice's "x" set with one deletecollection: each removal is erin's.
	erin, _ := client.New(ac.userConfig(t, "erin"), client.Options{Scheme: ac.c.Scheme})
	mk(alice, "x1")
	mk(alice, "x2")
	if err := erin.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingLabels{"set": "x"}); err != nil {
		t.Fatal(err)
	}
	sa := "system:serviceaccount:" + ns + ":deployer"
	ref := func(name string) string { return "v1/configmaps/" + ns + "/" + name }
	want := map[string]string{
		"[CREATE] " + ref("a"):  "alice",
		"[CREATE] " + ref("a2"): "alice",
		"[CREATE] " + ref("b"):  "bob",
		"[CREATE] " + ref("s"):  sa,
		"[UPDATE] " + ref("a"):  "bob",
		"[DELETE] " + ref("b"):  "alice",
		"[CREATE] " + ref("x1"): "alice",
		"[CREATE] " + ref("x2"): "alice",
		"[DELETE] " + ref("x1"): "erin",
		"[DELETE] " + ref("x2"): "erin",
	}
	var cs []commit
	testenv.Eventually(t, 30*time.Second, func() error {
		cs, err = gitLog(remote.RepoDir("per-change"), "main")
		if err != nil {
			return err
		}
		seen := 0
		for _, c := range cs {
			if _, ok := want[c.subject]; ok {
				seen++
			}
		}
		if seen < len(want) {
			return fmt.Errorf("%d of %d change commits pushed", seen, len(want))
		}
		return nil
	})
	for _, c := range cs {
		if c.committer != committer.Name {
			t.Errorf("commit %q committed by %q", c.subject, c.committer)
		}
		if w, ok := want[c.subject]; ok && c.author != w {
			t.Errorf("commit %q authored by %q <%s>, want %q", c.subject, c.author, c.email, w)
		}
	}

	// With a commit window, a batch never mixes authors: every change line of a commit belongs
	// to that commit's author.
	testenv.Eventually(t, 30*time.Second, func() error {
		cs, err = gitLog(remote.RepoDir("windowed"), "main")
		if err != nil {
			return err
		}
		seen := 0
		for _, c := range cs {
			for _, line := range append([]string{c.subject}, strings.Split(c.body, "\n")...) {
				if _, ok := want[strings.TrimSpace(line)]; ok {
					seen++
				}
			}
		}
		if seen < len(want) {
			return fmt.Errorf("%d of %d changes pushed", seen, len(want))
		}
		return nil
	})
	for _, c := range cs {
		for _, line := range append([]string{c.subject}, strings.Split(c.body, "\n")...) {
			if w, ok := want[strings.TrimSpace(line)]; ok && w != c.author {
				t.Errorf("windowed commit by %q holds %q, a change by %q", c.author, line, w)
			}
		}
	}
	t.Logf("per-change: %d commits; windowed: %d commits", len(mustLog(t, remote.RepoDir("per-change"))), len(cs))
}

func mustLog(t *testing.T, dir string) []commit {
	cs, err := gitLog(dir, "main")
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
