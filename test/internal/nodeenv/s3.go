package nodeenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/servers"
)

// S3Bucket is the bucket of the Decofile s3 target on the node's S3 server.
const S3Bucket = "sites"

// S3 is the s3 target's servers: an S3-compatible server the manager uploads to, and a CDN in
// front of its public bucket that site pods fetch their content from over TLS, trusting CA.
type S3 struct {
	*servers.S3Server
	// CDN is the CDN's host:port, on the node's machine-side address.
	CDN string
	// CA is the PEM of the CA that signed the CDN's certificate; site pods are given it.
	CA []byte
}

// startS3 starts the S3 server and the CDN on host; both stop when the test ends.
func startS3(t *testing.T, host string) *S3 {
	t.Helper()
	srv, err := servers.StartS3(context.Background(), servers.S3Options{Dir: t.TempDir(), Host: host})
	Must(t, err, "start the S3 server")
	t.Cleanup(func() { _ = srv.Stop() })
	Must(t, srv.CreateBucket(context.Background(), S3Bucket, true), "create the public bucket")
	certs, err := servers.NewMTLS(t.TempDir(), "site", host)
	Must(t, err, "the CDN's certificate")
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	Must(t, err, "listen for the CDN")
	origin, err := url.Parse(srv.Endpoint)
	Must(t, err, "parse the S3 endpoint")
	// Anonymous GETs pass to the path-style bucket; while the S3 server is down, they fail with
	// 502 as a CDN's would.
	cdn := &http.Server{Handler: httputil.NewSingleHostReverseProxy(origin)}
	go func() {
		if err := cdn.ServeTLS(l, filepath.Join(certs.CertDir, "tls.crt"), filepath.Join(certs.CertDir, "tls.key")); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("CDN: %v", err)
		}
	}()
	t.Cleanup(func() { _ = cdn.Close() })
	return &S3{S3Server: srv, CDN: l.Addr().String(), CA: certs.CAPEM}
}

// chartFlags are the s3 target's flags: uploads to the S3 server, path style, pods loading
// from the CDN under the bucket's path.
func (s *S3) chartFlags() map[string]any {
	return map[string]any{
		"s3-bucket":      S3Bucket,
		"s3-region":      s.Region,
		"s3-endpoint":    s.Endpoint,
		"s3-path-style":  true,
		"s3-public-host": s.CDN + "/" + S3Bucket,
	}
}

// TrustCDN makes the pods of d trust the CDN's CA, as pods trust a real CDN's: a ConfigMap of
// the CA in d's namespace, mounted, and named by SSL_CERT_FILE for the site runtime.
func (s *S3) TrustCDN(ctx context.Context, c client.Client, d *appsv1.Deployment) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cdnCAConfigMap, Namespace: d.Namespace}, Data: map[string]string{"ca.crt": string(s.CA)}}
	if err := c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the CDN's CA ConfigMap: %w", err)
	}
	pod := &d.Spec.Template.Spec
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "cdn-ca", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cdnCAConfigMap}}}})
	ctr := &pod.Containers[0]
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "cdn-ca", MountPath: "/etc/cdn-ca", ReadOnly: true})
	ctr.Env = append(ctr.Env, corev1.EnvVar{Name: "SSL_CERT_FILE", Value: "/etc/cdn-ca/ca.crt"})
	return nil
}

// cdnCAConfigMap holds the CDN's CA in a site's namespace.
const cdnCAConfigMap = "cdn-ca"

// s3CredentialsSecret is the Secret the chart reads the S3 credentials from.
const s3CredentialsSecret = "s3-credentials"
