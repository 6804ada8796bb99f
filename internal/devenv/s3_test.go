package devenv_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/devenv"
	"github.com/siteops/siteops/pkg/siteruntime"
)

// TestDevEnvS3Target: `siteops dev up` points the s3 target at its local S3 server, so an
// s3-target Decofile is uploaded there, readable anonymously at the URL in status.s3URL (the
// server's plain HTTP, not https), and a site runtime cold-starts from what the webhook injects.
func TestDevEnvS3Target(t *testing.T) {
	ctx := context.Background()
	env := devEnv(t)
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sites-s3"}}); err != nil {
		t.Fatal(err)
	}
	d := &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "blog", Namespace: "sites-s3"},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Target: decov1.TargetS3, Inline: &decov1.InlineSource{
			Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{"title":"dev"}`)}},
		}},
	}
	if err := c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	var got decov1.Decofile
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Get(ctx, client.ObjectKeyFromObject(d), &got)
		r := meta.FindStatusCondition(got.Status.Conditions, decov1.ConditionReady)
		if err == nil && r != nil && r.Status == metav1.ConditionTrue && r.Reason == decov1.ReasonS3Uploaded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not uploaded: %v %+v", err, got.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	u, err := url.Parse(got.Status.S3URL)
	if err != nil {
		t.Fatal(err)
	}
	want := "/" + devenv.S3Bucket + "/sites-s3/blog/decofile.json"
	if env.Servers.S3.Endpoint != u.Scheme+"://"+u.Host || u.Path != want {
		t.Fatalf("s3URL %s, want %s%s (the server's own scheme and address)", got.Status.S3URL, env.Servers.S3.Endpoint, want)
	}
	resp, err := http.Get(got.Status.S3URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"title":"dev"`)) {
		t.Fatal(fmt.Errorf("anonymous GET: %d %s", resp.StatusCode, body))
	}

	// A pod injected now gets that URL as DECO_RELEASE and cold-starts from it.
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "blog", Namespace: "sites-s3", Annotations: map[string]string{decov1.AnnotationInject: "blog"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "blog"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "blog"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site"}}}},
		},
	}
	if err := c.Create(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	envs := map[string]string{}
	for _, e := range deploy.Spec.Template.Spec.Containers[0].Env {
		envs[e.Name] = e.Value
	}
	if envs[decov1.EnvRelease] != got.Status.S3URL {
		t.Fatalf("%s=%q injected, want %s", decov1.EnvRelease, envs[decov1.EnvRelease], got.Status.S3URL)
	}
	rt, err := siteruntime.New(ctx, siteruntime.Options{Release: envs[decov1.EnvRelease],
		AllowedAuthorities: siteruntime.ParseAuthorities(envs[decov1.EnvAllowedAuthorities])})
	if err != nil {
		t.Fatalf("cold start from the injected environment: %v", err)
	}
	if !bytes.Contains(rt.Current().Decofile, []byte(`"title":"dev"`)) {
		t.Fatalf("cold-started runtime serves %s", rt.Current().Decofile)
	}
}
