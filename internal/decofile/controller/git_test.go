package controller_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestGitSourcePicksUpPushes(t *testing.T) {
	e := start(t)
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{Username: "deploy", Password: "pw"})
	url, err := remote.CreateRepo("site", "main")
	if err != nil {
		t.Fatal(err)
	}
	push := strings.Replace(url, "http://", "http://deploy:pw@", 1)
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	first := pushFiles(t, work, push, map[string]string{"site/blocks/Home%20Page.json": `{"v":1}`, "site/blocksX/x.json": `{}`})

	ns := e.c.Namespace(t, "git", nil)
	e.create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns}, StringData: map[string]string{"username": "deploy", "password": "pw"}})
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Interval: &metav1.Duration{Duration: pollEvery},
			Git: &decov1.GitSource{URL: url, Ref: "main", Path: "site/blocks", SecretRef: &corev1.LocalObjectReference{Name: "creds"}}}})
	df := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	if df.Status.GitHubCommit != first || df.Status.SourceType != decov1.SourceGit {
		t.Fatalf("status %+v, want commit %s", df.Status, first)
	}
	if a := df.Status.Artifact; a == nil || a.Revision != first || a.Digest != "sha256:"+df.Status.ContentHash || a.Size != df.Status.RawBytes {
		t.Fatalf("artifact %+v, want revision %s with the stored content's digest and size", a, first)
	}
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != `{"Home Page":{"v":1}}` {
		t.Fatalf("decofile.json %s", got)
	}

	second := pushFiles(t, work, push, map[string]string{"site/blocks/Home%20Page.json": `{"v":2}`})
	e.waitReady(t, ns, "site", metav1.ConditionTrue, "", func(d *decov1.Decofile) error {
		if d.Status.GitHubCommit != second {
			return errorf("still at %s", d.Status.GitHubCommit)
		}
		return nil
	})
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != `{"Home Page":{"v":2}}` {
		t.Fatalf("after the push decofile.json is %s", got)
	}

	// Wrong credentials: Ready=False Unauthorized, content kept.
	e.update(t, ns, "site", func(d *decov1.Decofile) { d.Spec.Git.SecretRef.Name = "missing" })
	df = e.waitReady(t, ns, "site", metav1.ConditionFalse, source.ReasonCredentials, nil)
	if !strings.Contains(ready(df).Message, "missing") {
		t.Fatalf("message %s", ready(df).Message)
	}
	e.create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "wrong", Namespace: ns}, StringData: map[string]string{"username": "deploy", "password": "nope"}})
	e.update(t, ns, "site", func(d *decov1.Decofile) { d.Spec.Git.SecretRef.Name = "wrong" })
	e.waitReady(t, ns, "site", metav1.ConditionFalse, source.ReasonUnauthorized, nil)
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != `{"Home Page":{"v":2}}` {
		t.Fatalf("content lost after a failure: %s", got)
	}
}

// pushFiles commits files in the work tree and pushes main to pushURL.
func pushFiles(t *testing.T, work, pushURL string, files map[string]string) string {
	t.Helper()
	sha := testenv.CommitFiles(t, work, "change", files)
	testenv.Git(t, work, "push", "-q", pushURL, "main")
	return sha
}
