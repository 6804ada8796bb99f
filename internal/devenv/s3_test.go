package devenv_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/devenv"
)

// TestDevEnvS3Target: `siteops dev up` points the s3 target at its local S3 server, so an
// s3-target Decofile is uploaded there and readable anonymously at the URL in status.s3URL
// (over the server's plain HTTP).
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
	if !strings.HasSuffix(env.Servers.S3.Endpoint, u.Host) || u.Path != want {
		t.Fatalf("s3URL %s, want host of %s and path %s", got.Status.S3URL, env.Servers.S3.Endpoint, want)
	}
	resp, err := http.Get(env.Servers.S3.Endpoint + u.Path)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"title":"dev"`)) {
		t.Fatal(fmt.Errorf("anonymous GET: %d %s", resp.StatusCode, body))
	}
}
