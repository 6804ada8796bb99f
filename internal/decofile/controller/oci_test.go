package controller_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestOCISourceDeliversAndFollowsItsTag: a Decofile reading an OCI artifact by tag is stored
// with a status.artifact naming tag@digest, follows a push to the tag, and keeps its content
// when a tenant points it at an address the platform does not allow.
func TestOCISourceDeliversAndFollowsItsTag(t *testing.T) {
	e := start(t)
	reg := testenv.Registry(t, servers.RegistryOptions{})
	first, err := reg.PushArtifact("shop/decofile", "prod", map[string]string{"site/blocks/home.json": `{"v":1}`})
	if err != nil {
		t.Fatal(err)
	}
	ns := e.c.Namespace(t, "oci", nil)
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceOCI, Interval: &metav1.Duration{Duration: pollEvery},
			OCI: &decov1.OCISource{URL: reg.URL("shop/decofile", "prod"), Path: "site/blocks"}}})
	df := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	want := `{"home":{"v":1}}`
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != want {
		t.Fatalf("decofile.json %s, want %s", got, want)
	}
	a := df.Status.Artifact
	if a == nil || a.Revision != "prod@"+first || a.Digest != "sha256:"+encode.Hash([]byte(want)) || a.Size != int64(len(want)) || a.LastUpdateTime == nil {
		t.Fatalf("artifact %+v, want revision prod@%s and the digest and size of %s", a, first, want)
	}
	if df.Status.GitHubCommit != "" || df.Status.SourceType != decov1.SourceOCI {
		t.Fatalf("githubCommit %q sourceType %q: an artifact is not a commit", df.Status.GitHubCommit, df.Status.SourceType)
	}
	if id := decov1.RolloutID(&df.Status); id != "revision:prod@"+first {
		t.Fatalf("rollout id %s", id)
	}
	if res := kstatusOf(t, df); res.Status != status.CurrentStatus {
		t.Fatalf("kstatus %s (%s), want Current", res.Status, res.Message)
	}

	second, err := reg.PushArtifact("shop/decofile", "prod", map[string]string{"site/blocks/home.json": `{"v":2}`})
	if err != nil {
		t.Fatal(err)
	}
	e.poke(t, ns, "site")
	e.waitReady(t, ns, "site", metav1.ConditionTrue, "", func(d *decov1.Decofile) error {
		if d.Status.Artifact == nil || d.Status.Artifact.Revision != "prod@"+second {
			return errorf("artifact %+v, want prod@%s", d.Status.Artifact, second)
		}
		return nil
	})
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != `{"home":{"v":2}}` {
		t.Fatalf("after the push decofile.json is %s", got)
	}

	// The tenant points it at an internal address: refused, content and artifact kept.
	e.update(t, ns, "site", func(d *decov1.Decofile) { d.Spec.OCI.URL = "oci://169.254.169.254/latest/meta-data:v1" })
	refused := e.waitReady(t, ns, "site", metav1.ConditionFalse, source.ReasonNotAllowed, nil)
	if !strings.Contains(ready(refused).Message, "169.254.169.254") {
		t.Fatalf("message %q does not name the refused address", ready(refused).Message)
	}
	if refused.Status.Artifact == nil || refused.Status.Artifact.Revision != "prod@"+second {
		t.Fatalf("artifact after the refusal %+v, want the stored one", refused.Status.Artifact)
	}
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != `{"home":{"v":2}}` {
		t.Fatalf("content lost after a refusal: %s", got)
	}
}
