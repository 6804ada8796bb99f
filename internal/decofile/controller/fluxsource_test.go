package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func gitRepository(ns, name, url string, spec map[string]any) *unstructured.Unstructured {
	s := map[string]any{"url": url, "interval": "1h", "timeout": "20s", "ref": map[string]any{"branch": "main"}}
	for k, v := range spec {
		s[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     s,
	}}
}

func sourceRefDecofile(ns, name string, ref decov1.FluxSourceRef) *decov1.Decofile {
	// An hour between polls: within a test, only the watch on the Flux object can bring news.
	return &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceFlux, Interval: &metav1.Duration{Duration: time.Hour}, SourceRef: &ref}}
}

// artifactOf waits for source-controller to give the Flux object an artifact of revision
// prefix want and returns its status.artifact.
func artifactOf(t *testing.T, c client.Client, obj *unstructured.Unstructured, want string) map[string]any {
	t.Helper()
	var a map[string]any
	testenv.Eventually(t, time.Minute, func() error {
		cur := obj.DeepCopy()
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		a, _, _ = unstructured.NestedMap(cur.Object, "status", "artifact")
		if rev, _ := a["revision"].(string); !strings.HasPrefix(rev, want) {
			return errorf("artifact %v, want revision %s…", a, want)
		}
		return nil
	})
	return a
}

// TestSourceRefDeliversAFluxArtifact: a Decofile naming a GitRepository that a real
// source-controller reconciles from the local git remote is stored from its artifact, follows a
// new commit through the watch on the GitRepository alone, and never reads another namespace's
// source or an artifact outside its object's storage folder.
func TestSourceRefDeliversAFluxArtifact(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo("flux-site", "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	first := pushFiles(t, work, url, map[string]string{"site/blocks/home.json": `{"v":1}`})

	ns := e.c.Namespace(t, "fluxsrc", nil)
	repo := gitRepository(ns, "site", url, nil)
	e.create(t, repo)
	artifactOf(t, e.c.Client, repo, "main@sha1:"+first)

	e.create(t, sourceRefDecofile(ns, "site", decov1.FluxSourceRef{Kind: "GitRepository", Name: "site", Path: "site/blocks"}))
	df := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != `{"home":{"v":1}}` {
		t.Fatalf("decofile.json %s", got)
	}
	if a := df.Status.Artifact; a == nil || a.Revision != "main@sha1:"+first {
		t.Fatalf("artifact %+v, want revision main@sha1:%s", a, first)
	}
	if res := kstatusOf(t, df); res.Status != status.CurrentStatus {
		t.Fatalf("kstatus %s (%s)", res.Status, res.Message)
	}

	// A new commit: source-controller is asked to look now, the Decofile follows by itself.
	second := pushFiles(t, work, url, map[string]string{"site/blocks/home.json": `{"v":2}`})
	cur := repo.DeepCopy()
	if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(repo), cur); err != nil {
		t.Fatal(err)
	}
	cur.SetAnnotations(map[string]string{"reconcile.fluxcd.io/requestedAt": time.Now().Format(time.RFC3339Nano)})
	if err := e.c.Client.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	artifactOf(t, e.c.Client, repo, "main@sha1:"+second)
	e.waitReady(t, ns, "site", metav1.ConditionTrue, "", func(d *decov1.Decofile) error {
		if d.Status.Artifact == nil || d.Status.Artifact.Revision != "main@sha1:"+second {
			return errorf("artifact %+v, want main@sha1:%s", d.Status.Artifact, second)
		}
		return nil
	})
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != `{"home":{"v":2}}` {
		t.Fatalf("after the new commit decofile.json is %s", got)
	}

	// Another namespace's tenant names this GitRepository: refused.
	other := e.c.Namespace(t, "fluxsrc-other", nil)
	e.create(t, sourceRefDecofile(other, "steal", decov1.FluxSourceRef{Kind: "GitRepository", Name: "site", Namespace: ns, Path: "site/blocks"}))
	stolen := e.waitReady(t, other, "steal", metav1.ConditionFalse, source.ReasonNotAllowed, nil)
	if !strings.Contains(ready(stolen).Message, "own namespace") {
		t.Fatalf("message %q", ready(stolen).Message)
	}

	// A status forged to point at the first namespace's artifact (a tenant may write the status
	// of its Flux objects): refused, nothing read.
	forged := gitRepository(other, "forged", url, map[string]any{"suspend": true})
	e.create(t, forged)
	real := artifactOf(t, e.c.Client, repo, "main@sha1:"+second)
	setArtifact := func(a map[string]any) {
		t.Helper()
		testenv.Eventually(t, waitFor, func() error {
			cur := forged.DeepCopy()
			if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(forged), cur); err != nil {
				return err
			}
			if err := unstructured.SetNestedMap(cur.Object, a, "status", "artifact"); err != nil {
				return err
			}
			return e.c.Client.Status().Update(ctx, cur)
		})
	}
	setArtifact(real)
	e.create(t, sourceRefDecofile(other, "forged", decov1.FluxSourceRef{Kind: "GitRepository", Name: "forged", Path: "site/blocks"}))
	refused := e.waitReady(t, other, "forged", metav1.ConditionFalse, source.ReasonNotAllowed, nil)
	if !strings.Contains(ready(refused).Message, "outside the object's own storage folder") {
		t.Fatalf("message %q", ready(refused).Message)
	}

	// Its own artifact under a digest that is not the file's (the GitRepository suspended so
	// source-controller leaves the forged status alone): refused, the stored content kept.
	cur = repo.DeepCopy()
	if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(repo), cur); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(cur.Object, true, "spec", "suspend")
	if err := e.c.Client.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	wrong := map[string]any{}
	for k, v := range real {
		wrong[k] = v
	}
	wrong["digest"] = "sha256:" + strings.Repeat("0", 64)
	wrong["revision"] = "main@sha1:" + strings.Repeat("0", 40)
	forged = repo // setArtifact writes the status of forged
	setArtifact(wrong)
	e.waitReady(t, ns, "site", metav1.ConditionFalse, source.ReasonInvalidArchive, func(d *decov1.Decofile) error {
		if m := ready(d).Message; !strings.Contains(m, "digest") {
			return errorf("message %q", m)
		}
		return nil
	})
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != `{"home":{"v":2}}` {
		t.Fatalf("after a digest mismatch decofile.json is %s", got)
	}
	if cm := (&corev1.ConfigMap{}); e.c.Client.Get(ctx, client.ObjectKey{Namespace: other, Name: "decofile-forged"}, cm) == nil {
		t.Fatalf("a forged artifact was stored: %v", cm.Data)
	}
}
