package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source/ghtest"
	"github.com/siteops/siteops/internal/testenv"
)

// TestRolledBackCommitIsNotFetchedAgain: a commit a progressive rollout rolled back
// (status.rollout.failedCommit) is neither downloaded nor stored again, even when the spec
// names it; another commit is.
func TestRolledBackCommitIsNotFetchedAgain(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "rolledback", nil)
	org, repo := "acme", "site-"+ns
	good := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/Header.json": `{"v":1}`})
	bad := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/Header.json": `{"v":-1}`})
	df := githubDecofile(ns, org, repo, good, "")
	e.create(t, df)
	stored := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		d := e.get(t, ns, "site")
		d.Status.Rollout = &decov1.RolloutStatus{ID: "commit:" + bad, FailedID: "commit:" + bad, FailedCommit: bad, FailedHash: "rolled-back"}
		return e.c.Client.Status().Update(context.Background(), d)
	})
	if err != nil {
		t.Fatal(err)
	}
	archives := e.gh.CountRepo(org, repo, ghtest.KindArchive)
	requested := time.Now().Format(time.RFC3339Nano)
	e.update(t, ns, "site", func(d *decov1.Decofile) {
		d.Spec.GitHub.Commit = bad
		d.Annotations = map[string]string{decov1.AnnotationReconcileRequestedAt: requested}
	})
	testenv.Eventually(t, waitFor, func() error {
		if h := e.get(t, ns, "site").Status.LastHandledReconcileAt; h != requested {
			return fmt.Errorf("not reconciled yet (%q)", h)
		}
		return nil
	})
	now := e.get(t, ns, "site")
	if n := e.gh.CountRepo(org, repo, ghtest.KindArchive); n != archives || now.Status.GitHubCommit != good || now.Status.ContentHash != stored.Status.ContentHash {
		t.Fatalf("the rolled-back commit was fetched (%d archives, was %d) or stored (%s)", n, archives, now.Status.GitHubCommit)
	}
	next := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/Header.json": `{"v":2}`})
	e.update(t, ns, "site", func(d *decov1.Decofile) { d.Spec.GitHub.Commit = next })
	e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, func(d *decov1.Decofile) error {
		if d.Status.GitHubCommit != next {
			return fmt.Errorf("commit %s", d.Status.GitHubCommit)
		}
		return nil
	})
}
