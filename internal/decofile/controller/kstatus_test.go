package controller_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// kstatusOf is what kstatus (and Flux's health checks, kubectl-wait-style tools built on it)
// make of the Decofile.
func kstatusOf(t *testing.T, df *decov1.Decofile) *status.Result {
	t.Helper()
	return testenv.Kstatus(t, df, decov1.GroupVersion.WithKind("Decofile"))
}

// TestKstatus: a Decofile that cannot be stored (TooLarge, a refused source) reads as Failed,
// with Stalled=True;
// a healthy one reads as Current, with neither Reconciling nor Stalled; a TooLarge one fixed
// drops Stalled again.
func TestKstatus(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "kstatus", nil)
	// Created as a generic client does, and read in the API server's answer before any
	// reconcile: not Current yet.
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "ok", Namespace: ns},
		Spec:       decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"a": `1`})}})
	if err != nil {
		t.Fatal(err)
	}
	created := &unstructured.Unstructured{Object: obj}
	created.SetGroupVersionKind(decov1.GroupVersion.WithKind("Decofile"))
	if err := e.c.Client.Create(context.Background(), created); err != nil {
		t.Fatal(err)
	}
	if res, err := status.Compute(created); err != nil || res.Status != status.InProgressStatus {
		t.Fatalf("new Decofile: kstatus %v %v, want InProgress; status %v", res, err, created.Object["status"])
	}
	ok := e.waitReady(t, ns, "ok", metav1.ConditionTrue, "", nil)
	if res := kstatusOf(t, ok); res.Status != status.CurrentStatus {
		t.Fatalf("healthy Decofile: kstatus %s (%s), want Current", res.Status, res.Message)
	}
	for _, c := range []string{decov1.ConditionReconciling, decov1.ConditionStalled} {
		if meta.FindStatusCondition(ok.Status.Conditions, c) != nil {
			t.Fatalf("healthy Decofile has %s: %+v", c, ok.Status.Conditions)
		}
	}

	// Random hex does not compress below the (lowered) ConfigMap limit.
	buf := make([]byte, testLimit)
	if _, err := rand.Read(buf); err != nil {
		t.Fatal(err)
	}
	big := map[string]string{"blob": `"` + hex.EncodeToString(buf) + `"`}
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(big)}})
	tooLarge := e.waitReady(t, ns, "big", metav1.ConditionFalse, decov1.ReasonTooLarge, nil)
	res := kstatusOf(t, tooLarge)
	if res.Status != status.FailedStatus {
		t.Fatalf("TooLarge Decofile: kstatus %s (%s), want Failed", res.Status, res.Message)
	}
	st := meta.FindStatusCondition(tooLarge.Status.Conditions, decov1.ConditionStalled)
	if st == nil || st.Status != metav1.ConditionTrue || st.Reason != decov1.ReasonTooLarge || st.ObservedGeneration != tooLarge.Generation {
		t.Fatalf("Stalled %+v", st)
	}
	if meta.IsStatusConditionTrue(tooLarge.Status.Conditions, decov1.ConditionReconciling) {
		t.Fatal("Reconciling and Stalled both True")
	}

	// A source the platform does not allow (link-local metadata address) is as final.
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "refused", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Git: &decov1.GitSource{URL: "https://169.254.169.254/site.git"}}})
	refused := e.waitReady(t, ns, "refused", metav1.ConditionFalse, source.ReasonNotAllowed, nil)
	if res := kstatusOf(t, refused); res.Status != status.FailedStatus {
		t.Fatalf("refused source: kstatus %s (%s), want Failed", res.Status, res.Message)
	}

	e.update(t, ns, "big", func(d *decov1.Decofile) { d.Spec.Inline = inline(map[string]string{"blob": `"small"`}) })
	fixed := e.waitReady(t, ns, "big", metav1.ConditionTrue, "", nil)
	if res := kstatusOf(t, fixed); res.Status != status.CurrentStatus {
		t.Fatalf("fixed Decofile: kstatus %s (%s), want Current", res.Status, res.Message)
	}
	if meta.FindStatusCondition(fixed.Status.Conditions, decov1.ConditionStalled) != nil {
		t.Fatalf("Stalled left after the fix: %+v", fixed.Status.Conditions)
	}
}

// TestKstatusSourceDownWithContentStored: a source that goes down after content was stored is a
// transient failure: Ready=False with Reconciling=True, kstatus InProgress (never Failed), the
// content kept; it reads Current again once the source answers.
func TestKstatusSourceDownWithContentStored(t *testing.T) {
	e := start(t)
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo("down", "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	first := pushFiles(t, work, url, map[string]string{"blocks/a.json": `{"v":1}`})
	ns := e.c.Namespace(t, "kstatus-down", nil)
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Git: &decov1.GitSource{URL: url, Path: "blocks"}}})
	e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)

	remote.SetFault(&servers.GitFault{Refuse: true})
	e.poke(t, ns, "site")
	down := e.waitReady(t, ns, "site", metav1.ConditionFalse, source.ReasonUnavailable, nil)
	if res := kstatusOf(t, down); res.Status != status.InProgressStatus {
		t.Fatalf("source down: kstatus %s (%s), want InProgress", res.Status, res.Message)
	}
	if !meta.IsStatusConditionTrue(down.Status.Conditions, decov1.ConditionReconciling) || meta.FindStatusCondition(down.Status.Conditions, decov1.ConditionStalled) != nil {
		t.Fatalf("source down: conditions %+v, want Reconciling=True and no Stalled", down.Status.Conditions)
	}
	if down.Status.Revision() != first || e.configMap(t, ns, "site").Data[decov1.KeyJSON] != `{"a":{"v":1}}` {
		t.Fatalf("source down: revision %s and the content not kept", down.Status.Revision())
	}

	remote.SetFault(nil)
	back := e.waitReady(t, ns, "site", metav1.ConditionTrue, "", nil)
	if res := kstatusOf(t, back); res.Status != status.CurrentStatus {
		t.Fatalf("source back: kstatus %s (%s), want Current", res.Status, res.Message)
	}
}
