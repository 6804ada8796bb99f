package s3target_test

import (
	"errors"
	"fmt"
	"net/http"
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

func TestWebhookURLMatchesUploadKey(t *testing.T) {
	df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: "sites-shop", Name: "shop"}}
	for name, tc := range map[string]struct {
		cfg    s3target.Config
		region string
		want   string
		host   string
	}{
		"aws default":           {s3target.Config{Bucket: "b"}, "eu-west-1", "https://b.s3.eu-west-1.amazonaws.com/sites-shop/shop/decofile.json", "b.s3.eu-west-1.amazonaws.com"},
		"cdn with prefix":       {s3target.Config{Bucket: "b", Prefix: "/prod/", PublicHost: "configs.example.com"}, "", "https://configs.example.com/prod/sites-shop/shop/decofile.json", "configs.example.com"},
		"path-style endpoint":   {s3target.Config{Bucket: "b", Endpoint: "http://127.0.0.1:9000", PathStyle: true, Prefix: "p"}, "", "https://127.0.0.1:9000/b/p/sites-shop/shop/decofile.json", "127.0.0.1:9000"},
		"virtual-host endpoint": {s3target.Config{Bucket: "b", Endpoint: "https://s3.example.net"}, "", "https://b.s3.example.net/sites-shop/shop/decofile.json", "b.s3.example.net"},
		"public host with path": {s3target.Config{Bucket: "b", PublicHost: "cdn.example.com:8443/b/", Prefix: "x"}, "", "https://cdn.example.com:8443/b/x/sites-shop/shop/decofile.json", "cdn.example.com:8443"},
	} {
		t.Run(name, func(t *testing.T) {
			w := tc.cfg.Webhook(tc.region)
			if got := w.ObjectURL(df); got != tc.want || w.PublicHost != tc.host {
				t.Fatalf("URL %q host %q, want %q %q", got, w.PublicHost, tc.want, tc.host)
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
