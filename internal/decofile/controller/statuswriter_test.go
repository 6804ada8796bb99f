package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/testenv"
)

// wireSizes records the body sizes of the requests a client sends and of the answers it gets.
type wireSizes struct {
	mu        sync.Mutex
	sent, got []int
}

func (w *wireSizes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent := 0
		if req.Body != nil {
			raw, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			sent = len(raw)
			req.Body = io.NopCloser(bytes.NewReader(raw))
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		raw, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(raw))
		w.mu.Lock()
		w.sent, w.got = append(w.sent, sent), append(w.got, len(raw))
		w.mu.Unlock()
		return resp, nil
	})
}

// TestStatusWriterSendsStatusAlone: a status write on a Decofile holding 300 KB of inline content
// sends and receives a few hundred bytes, changes the status, keeps the spec, labels and
// annotations, returns the new resourceVersion, and fails with a Conflict when the status changed
// since the resourceVersion it was computed from.
func TestStatusWriterSendsStatusAlone(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	big := `{"html":"` + strings.Repeat("<p>lorem ipsum</p>", 300<<10/18) + `"}`
	df := &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: c.Namespace(t, "statuswriter", nil),
			Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"note": "kept"}},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"page": big})},
	}
	if err := c.Client.Create(ctx, df); err != nil {
		t.Fatal(err)
	}
	sizes := &wireSizes{}
	cfg := rest.CopyConfig(c.Config)
	cfg.Wrap(sizes.wrap)
	w, err := controller.NewStatusWriter(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}

	next := df.Status.DeepCopy()
	next.ContentHash = "sha256:aa"
	meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: decov1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: decov1.ReasonSucceeded, Message: "stored"})
	rv, err := w.Write(ctx, df, &df.Status, next)
	if err != nil {
		t.Fatalf("write status: %v", err)
	}
	var got decov1.Decofile
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(df), &got); err != nil {
		t.Fatal(err)
	}
	if rv == "" || rv != got.ResourceVersion {
		t.Errorf("Write returned resourceVersion %q, the Decofile has %q", rv, got.ResourceVersion)
	}
	if got.Status.ContentHash != "sha256:aa" || !meta.IsStatusConditionTrue(got.Status.Conditions, decov1.ConditionReady) {
		t.Errorf("status not written: %+v", got.Status)
	}
	var page struct{ HTML string }
	if err := json.Unmarshal(got.Spec.Inline.Value["page"].Raw, &page); err != nil || "{\"html\":\""+page.HTML+"\"}" != big {
		t.Errorf("the inline content changed: %d bytes (%v), want %d", len(page.HTML), err, len(big))
	}
	if got.Labels["team"] != "a" || got.Annotations["note"] != "kept" {
		t.Errorf("metadata changed: labels %v, annotations %v", got.Labels, got.Annotations)
	}
	sizes.mu.Lock()
	if len(sizes.sent) != 1 || sizes.sent[0] > 2048 || sizes.got[0] > 2048 {
		t.Errorf("requests sent %v bytes and got %v bytes back, want one of each under 2 KiB (the content is %d)", sizes.sent, sizes.got, len(big))
	}
	sizes.mu.Unlock()

	// Nothing changed: nothing is sent.
	if rv, err := w.Write(ctx, &got, &got.Status, got.Status.DeepCopy()); err != nil || rv != "" {
		t.Errorf("an unchanged status: Write = %q, %v; want nothing sent", rv, err)
	}
	// Computed from the Decofile as it was before the first write: a Conflict, nothing written.
	stale := next.DeepCopy()
	stale.ContentHash = "sha256:bb"
	if _, err := w.Write(ctx, df, next, stale); !apierrors.IsConflict(err) {
		t.Errorf("a write from a stale resourceVersion: %v, want a Conflict", err)
	}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(df), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.ContentHash != "sha256:aa" {
		t.Errorf("the stale write changed the status: contentHash %q", got.Status.ContentHash)
	}
	sizes.mu.Lock()
	defer sizes.mu.Unlock()
	if len(sizes.sent) != 2 {
		t.Errorf("%d requests, want 2 (the unchanged status sends none)", len(sizes.sent))
	}
}
