package s3target_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/decofile/s3target"
)

// TestWebhookURLMatchesUploadKey: the URL the webhook injects (DECO_RELEASE) is the public
// host and path followed by exactly the key the uploader (Store) writes, for every way the
// bucket can be addressed.
func TestWebhookURLMatchesUploadKey(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: "sites-shop", Name: "shop"}, Spec: decov1.DecofileSpec{DeploymentID: "shop-prod"}}
	for name, tc := range map[string]struct {
		cfg       s3target.Config
		base      string // scheme, public host and path before the key
		uploadKey string // the key as the S3 API sees it
	}{
		"aws default":           {s3target.Config{Bucket: "b", Region: "eu-west-1"}, "https://b.s3.eu-west-1.amazonaws.com/", "sites-shop/shop-prod/decofile.json"},
		"cdn with prefix":       {s3target.Config{Bucket: "b", Prefix: "/prod/", PublicHost: "configs.example.com"}, "https://configs.example.com/", "prod/sites-shop/shop-prod/decofile.json"},
		"path-style endpoint":   {s3target.Config{Bucket: "b", Endpoint: "http://127.0.0.1:9000", PathStyle: true, Prefix: "p"}, "https://127.0.0.1:9000/b/", "p/sites-shop/shop-prod/decofile.json"},
		"virtual-host endpoint": {s3target.Config{Bucket: "b", Endpoint: "https://s3.example.net"}, "https://b.s3.example.net/", "sites-shop/shop-prod/decofile.json"},
		"public host with path": {s3target.Config{Bucket: "b", PublicHost: "cdn.example.com:8443/b/", Prefix: "x"}, "https://cdn.example.com:8443/b/", "x/sites-shop/shop-prod/decofile.json"},
		"plain-http dev server": {s3target.Config{Bucket: "b", Endpoint: "http://10.244.20.1:9000", PathStyle: true, PublicScheme: "http"}, "http://10.244.20.1:9000/b/", "sites-shop/shop-prod/decofile.json"},
	} {
		t.Run(name, func(t *testing.T) {
			store, err := s3target.New(context.Background(), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			key := store.Key(df) // what Put uploads to
			if key != tc.uploadKey {
				t.Fatalf("upload key %q, want %q", key, tc.uploadKey)
			}
			w := store.Webhook()
			if got, want := w.ObjectURL(df), tc.base+key; got != want {
				t.Fatalf("webhook URL %q, want %q (public base + the uploader's key)", got, want)
			}
			if got := store.URL(df); got != w.ObjectURL(df) {
				t.Fatalf("status URL %q differs from the webhook's %q", got, w.ObjectURL(df))
			}
			if _, host, _ := strings.Cut(tc.base, "://"); !strings.HasPrefix(host, w.PublicHost+"/") {
				t.Fatalf("public host %q, want the host of %q", w.PublicHost, tc.base)
			}
		})
	}
	if w := (s3target.Config{}).Webhook("x"); w != (inject.S3Config{}) {
		t.Fatalf("unconfigured target gives the webhook %+v", w)
	}
}

func TestFlagsEnvAndValidate(t *testing.T) {
	t.Setenv(s3target.EnvBucket, "from-env")
	t.Setenv(s3target.EnvPathStyle, "true")
	var c s3target.Config
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.BindFlags(fs)
	if c.Bucket != "from-env" || !c.PathStyle {
		t.Fatalf("env defaults not applied: %+v", c)
	}
	if err := fs.Parse([]string{"--s3-bucket=flag", "--s3-endpoint=http://127.0.0.1:1", "--s3-delete-on-finalize"}); err != nil {
		t.Fatal(err)
	}
	if c.Bucket != "flag" || !c.DeleteOnFinalize || c.Validate() != nil {
		t.Fatalf("flags %+v: %v", c, c.Validate())
	}
	for name, bad := range map[string]s3target.Config{
		"endpoint without bucket":  {Endpoint: "http://x"},
		"endpoint not a URL":       {Bucket: "b", Endpoint: "127.0.0.1:9000"},
		"public host with scheme":  {Bucket: "b", PublicHost: "https://cdn.example.com"},
		"finalizer without bucket": {DeleteOnFinalize: true},
		"unknown public scheme":    {Bucket: "b", PublicScheme: "ftp"},
	} {
		if bad.Validate() == nil {
			t.Errorf("%s: accepted %+v", name, bad)
		}
	}
}

func TestReason(t *testing.T) {
	resp := func(code int) error {
		return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}}, Err: errors.New("x")}}
	}
	for want, err := range map[string]error{
		s3target.ReasonBucketNotFound: fmt.Errorf("put: %w", &smithy.GenericAPIError{Code: "NoSuchBucket"}),
		s3target.ReasonAccessDenied:   &smithy.GenericAPIError{Code: "SignatureDoesNotMatch"},
		s3target.ReasonUnavailable:    resp(503),
		s3target.ReasonUploadFailed:   resp(400),
	} {
		if got, _ := s3target.Reason(err); got != want {
			t.Errorf("Reason(%v) = %s, want %s", err, got, want)
		}
	}
	if got, _ := s3target.Reason(resp(0)); got != s3target.ReasonUnavailable {
		t.Errorf("no response: %s", got)
	}
	if got, _ := s3target.Reason(resp(http.StatusForbidden)); got != s3target.ReasonAccessDenied {
		t.Errorf("403: %s", got)
	}
	if got, _ := s3target.Reason(errors.New("dial tcp: connection refused")); got != s3target.ReasonUnavailable {
		t.Errorf("network error: %s", got)
	}
}
