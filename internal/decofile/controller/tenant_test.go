package controller_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/encode/sample"
	"github.com/siteops/siteops/internal/testenv"
)

// restoreWithin is how soon a defaced ConfigMap must be back: the controller watches it, so no
// poll or resync is needed.
const restoreWithin = 10 * time.Second

func hexSHA(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestTenantDefacedConfigMapRestored: the tenant (edit in its namespace) replaces its
// Decofile's stored value and, in the same patch, the deco.sites/stored-hash and content-hash
// annotations so that they match. The operator decides from status.storedHash, which the
// tenant cannot write: the ConfigMap is restored promptly with a Warning Event, and the status
// keeps describing the real content. The bin case plants a brotli bomb (32 MiB of JSON from a
// few kilobytes) where the rollout loader would decode it.
func TestTenantDefacedConfigMapRestored(t *testing.T) {
	e := start(t)
	large := map[string]string{}
	for n, b := range sample.Generate(sample.Options{Seed: 11, Blocks: 20, TargetBytes: 200 << 10}) {
		large[n] = string(b)
	}
	bomb, err := encode.Compress([]byte(`{"a":"`+strings.Repeat("A", 32<<20)+`"}`), encode.Level{Quality: 5, LGWin: 24})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		values map[string]string
		key    string
		forged string
	}{
		{"json", map[string]string{"a": `{"v":1}`}, decov1.KeyJSON, `{"a":{"v":"defaced"}}`},
		{"bin bomb", large, decov1.KeyBin, bomb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := e.c.Tenant(t, "deface", nil)
			ns := tn.Namespace
			df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
				Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(tc.values)}}
			if err := tn.Client.Create(context.Background(), df); err != nil {
				t.Fatal(err)
			}
			before := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
			orig := e.configMap(t, ns, "site")
			if _, ok := orig.Data[tc.key]; !ok {
				t.Fatalf("test premise: content stored as %v, want %s", orig.Data, tc.key)
			}

			// One patch: forged value and annotations that vouch for it.
			patch, _ := json.Marshal(map[string]any{
				"metadata": map[string]any{"annotations": map[string]string{
					controller.AnnotationStoredHash:  hexSHA(tc.forged),
					controller.AnnotationContentHash: before.Status.ContentHash,
				}},
				"data": map[string]string{tc.key: tc.forged},
			})
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "decofile-site", Namespace: ns}}
			if err := tn.Client.Patch(context.Background(), cm, client.RawPatch(types.MergePatchType, patch)); err != nil {
				t.Fatalf("the tenant could not patch its ConfigMap (test premise): %v", err)
			}
			testenv.Eventually(t, restoreWithin, func() error {
				got := e.configMap(t, ns, "site")
				if got.Data[tc.key] != orig.Data[tc.key] || got.Annotations[controller.AnnotationStoredHash] != orig.Annotations[controller.AnnotationStoredHash] {
					return errorf("ConfigMap still defaced (%d bytes in %s)", len(got.Data[tc.key]), tc.key)
				}
				if got.Data[decov1.KeyTimestamp] != orig.Data[decov1.KeyTimestamp] {
					return errorf("restored with timestamp %s, want the stored %s", got.Data[decov1.KeyTimestamp], orig.Data[decov1.KeyTimestamp])
				}
				return nil
			})
			e.hasEvent(t, ns, "site", corev1.EventTypeWarning, controller.ReasonConfigMapRestored, "decofile-site")
			after := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
			if after.Status.ContentHash != before.Status.ContentHash || after.Status.StoredHash != hexSHA(orig.Data[tc.key]) {
				t.Fatalf("status after the restore %+v, before %+v", after.Status, before.Status)
			}
		})
	}
}

// TestTenantCannotWriteStatus: status is what the operator trusts (storedHash) and reports;
// the tenant's edit role does not reach decofiles/status.
func TestTenantCannotWriteStatus(t *testing.T) {
	e := start(t)
	tn := e.c.Tenant(t, "status", nil)
	df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: tn.Namespace},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"a": `1`})}}
	if err := tn.Client.Create(context.Background(), df); err != nil {
		t.Fatal(err)
	}
	cur := e.waitReady(t, tn.Namespace, "site", metav1.ConditionTrue, "", nil)
	forged := cur.DeepCopy()
	forged.Status.StoredHash = hexSHA("defaced")
	err := tn.Client.Status().Patch(context.Background(), forged, client.MergeFrom(cur))
	if !apierrors.IsForbidden(err) {
		t.Fatalf("tenant status patch: want Forbidden, got %v", err)
	}
	err = tn.Client.Status().Update(context.Background(), forged)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("tenant status update: want Forbidden, got %v", err)
	}
	// Through the main resource the status is ignored (status subresource).
	viaSpec := cur.DeepCopy()
	viaSpec.Status.StoredHash = hexSHA("defaced")
	if err := tn.Client.Update(context.Background(), viaSpec); err != nil {
		t.Fatal(err)
	}
	if got := e.get(t, tn.Namespace, "site"); got.Status.StoredHash != cur.Status.StoredHash {
		t.Fatalf("status.storedHash changed by a tenant update: %s", got.Status.StoredHash)
	}
}

// TestTenantValidation: names that become part of S3 keys, URLs, object names and labels are
// refused by the API server for the tenant, as is a poll interval below the floor.
func TestTenantValidation(t *testing.T) {
	e := start(t)
	tn := e.c.Tenant(t, "valid", nil)
	base := func() *decov1.Decofile {
		return &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: tn.Namespace},
			Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"a": `1`})}}
	}
	gh := func(d *decov1.Decofile, commit, secret string) {
		d.Spec.Source, d.Spec.Inline = decov1.SourceGitHub, nil
		d.Spec.GitHub = &decov1.GitHubSource{Org: "acme", Repo: "site", Commit: commit, Secret: secret}
	}
	bad := map[string]func(*decov1.Decofile){
		"deploymentId ../sites-shop/x": func(d *decov1.Decofile) { d.Spec.DeploymentID = "../sites-shop/x" },
		"deploymentId with a slash":    func(d *decov1.Decofile) { d.Spec.DeploymentID = "shop/x" },
		"deploymentId upper case":      func(d *decov1.Decofile) { d.Spec.DeploymentID = "Shop" },
		"deploymentId with a dot":      func(d *decov1.Decofile) { d.Spec.DeploymentID = "shop.prod" },
		"deploymentId of 64 chars":     func(d *decov1.Decofile) { d.Spec.DeploymentID = strings.Repeat("a", 64) },
		"name with a dot":              func(d *decov1.Decofile) { d.Name = "shop.prod" },
		"name of 64 chars":             func(d *decov1.Decofile) { d.Name = strings.Repeat("a", 64) },
		"interval 5s":                  func(d *decov1.Decofile) { d.Spec.Interval = &metav1.Duration{Duration: 5 * time.Second} },
		"interval 9.9s":                func(d *decov1.Decofile) { d.Spec.Interval = &metav1.Duration{Duration: 9900 * time.Millisecond} },
		"commit escaping the API path": func(d *decov1.Decofile) { gh(d, "../../orgs/x", "") },
		"commit with a query":          func(d *decov1.Decofile) { gh(d, "main?x=1", "") },
		"github secret ../x":           func(d *decov1.Decofile) { gh(d, "main", "../x") },
		"git ref with ..": func(d *decov1.Decofile) {
			d.Spec.Source, d.Spec.Inline = decov1.SourceGit, nil
			d.Spec.Git = &decov1.GitSource{URL: "https://git.example.com/a/b.git", Ref: "a/../b"}
		},
		"git secretRef ../x": func(d *decov1.Decofile) {
			d.Spec.Source, d.Spec.Inline = decov1.SourceGit, nil
			d.Spec.Git = &decov1.GitSource{URL: "https://git.example.com/a/b.git", SecretRef: &corev1.LocalObjectReference{Name: "../x"}}
		},
	}
	for name, change := range bad {
		d := base()
		change(d)
		if err := tn.Client.Create(context.Background(), d); !apierrors.IsInvalid(err) {
			t.Errorf("%s: want Invalid from the API server, got %v", name, err)
			_ = tn.Client.Delete(context.Background(), d)
		}
	}
	good := map[string]func(*decov1.Decofile){
		"deploymentId shop-prod-2": func(d *decov1.Decofile) { d.Name = "a"; d.Spec.DeploymentID = "shop-prod-2" },
		"interval 10s":             func(d *decov1.Decofile) { d.Name = "b"; d.Spec.Interval = &metav1.Duration{Duration: 10 * time.Second} },
		"branch feature/x-1.2":     func(d *decov1.Decofile) { d.Name = "c"; gh(d, "feature/x-1.2", "gh-token.v2") },
		"name of 63 chars":         func(d *decov1.Decofile) { d.Name = strings.Repeat("a", 63) },
	}
	for name, change := range good {
		d := base()
		change(d)
		if err := tn.Client.Create(context.Background(), d); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
}
