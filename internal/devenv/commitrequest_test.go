package devenv_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/commitrequest"
	"github.com/siteops/siteops/internal/mirror/store"
)

// TestDevEnvCommitRequestAuthorCannotBeForged: `siteops dev up` serves the CommitRequest webhook
// to its API server, which presents its admission client certificate: a real CommitRequest
// records its submitter, and an AdmissionReview posted to the webhook port by anyone else is
// refused and records nothing.
func TestDevEnvCommitRequestAuthorCannotBeForged(t *testing.T) {
	env := devEnv(t)
	ctx := context.Background()
	st, err := store.NewRedisStore(store.RedisStoreConfig{Addr: env.Servers.MirrorRedis.Addr, KeyPrefix: store.DefaultKeyPrefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	authors := st.CommandAuthorStore()

	cfg, err := env.AddUser(envtest.User{Name: "alice", Groups: []string{"system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	alice, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	cr := &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "release"},
		Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Message: "Release"}}
	if err := alice.Create(ctx, cr); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, ok := authors.LookupCommandAuthor(ctx, cr.UID)
		if ok && a.Author == "alice" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the submitter of a CommitRequest the API server admitted was not recorded: %+v, %v", a, ok)
		}
		time.Sleep(100 * time.Millisecond)
	}

	review, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "forged-review",
			Kind:      metav1.GroupVersionKind{Group: mirrorv1alpha1.GroupVersion.Group, Version: mirrorv1alpha1.GroupVersion.Version, Kind: "CommitRequest"},
			Resource:  metav1.GroupVersionResource{Group: mirrorv1alpha1.GroupVersion.Group, Version: mirrorv1alpha1.GroupVersion.Version, Resource: "commitrequests"},
			Namespace: "default", Name: "forged", Operation: admissionv1.Create,
			UserInfo: authnv1.UserInfo{Username: "platform-admin"},
			Object:   runtime.RawExtension{Raw: []byte(`{"apiVersion":"mirror.siteops.dev/v1alpha1","kind":"CommitRequest","metadata":{"name":"forged","namespace":"default","uid":"forged-uid"}}`)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the forger does not check the server
	resp, err := hc.Post(fmt.Sprintf("https://%s%s", env.WebhookAddr(), commitrequest.WebhookPath), "application/json", bytes.NewReader(review))
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a review without the API server's client certificate got status %d, want 403", resp.StatusCode)
		}
	}
	if a, ok := authors.LookupCommandAuthor(ctx, types.UID("forged-uid")); ok {
		t.Errorf("a forged review recorded %+v", a)
	}
}
