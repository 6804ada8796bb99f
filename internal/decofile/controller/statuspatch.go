package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// StatusWriter writes Decofile statuses. Both the delivery and the rollout controller write
// through it. Create it with NewStatusWriter.
type StatusWriter struct {
	rest rest.Interface
}

// NewStatusWriter returns a StatusWriter sending its requests with cfg through httpClient (the
// manager's: mgr.GetConfig(), mgr.GetHTTPClient()), or a client of its own when that is nil.
func NewStatusWriter(cfg *rest.Config, httpClient *http.Client) (*StatusWriter, error) {
	c := rest.CopyConfig(cfg)
	if httpClient == nil {
		var err error
		if httpClient, err = rest.HTTPClientFor(c); err != nil {
			return nil, fmt.Errorf("make the client writing Decofile statuses: %w", err)
		}
	}
	c.GroupVersion = &decov1.GroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("make the client writing Decofile statuses: %w", err)
	}
	return &StatusWriter{rest: rc}, nil
}

// metadataOnly asks the API server to answer with the object's metadata alone.
const metadataOnly = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

// statusBody is what a status update sends: no spec. The API server takes everything but the
// status from the stored object, and the spec may hold megabytes of inline content.
type statusBody struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta      `json:"metadata"`
	Status          *decov1.DecofileStatus `json:"status"`
}

// Write replaces the status of df, as read at its resourceVersion, old, with next, and returns
// the resourceVersion the API server gave the result; nothing is sent ("" returned) when they are
// equal. The update carries df's resourceVersion, so a status written since makes it fail with a
// Conflict (read again and retry). It sends no spec and asks for the metadata alone in return:
// a merge patch would make the API server encode, patch and decode the whole object, inline
// content included, and send it back.
func (w *StatusWriter) Write(ctx context.Context, df metav1.Object, old, next *decov1.DecofileStatus) (string, error) {
	if equality.Semantic.DeepEqual(old, next) {
		return "", nil
	}
	body, err := json.Marshal(statusBody{
		TypeMeta: metav1.TypeMeta{APIVersion: decov1.GroupVersion.String(), Kind: "Decofile"},
		// The UID too: the API server refuses the write to another object of the same name.
		Metadata: metav1.ObjectMeta{Namespace: df.GetNamespace(), Name: df.GetName(), UID: df.GetUID(), ResourceVersion: df.GetResourceVersion()},
		Status:   next,
	})
	if err != nil {
		return "", fmt.Errorf("encode the status of Decofile %s/%s: %w", df.GetNamespace(), df.GetName(), err)
	}
	raw, err := w.rest.Put().Namespace(df.GetNamespace()).Resource("decofiles").Name(df.GetName()).SubResource("status").
		SetHeader("Accept", metadataOnly).Body(body).Do(ctx).Raw()
	if err != nil {
		return "", fmt.Errorf("update the status of Decofile %s/%s: %w", df.GetNamespace(), df.GetName(), err)
	}
	var written metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &written); err != nil {
		return "", fmt.Errorf("read the answer to the status update of Decofile %s/%s: %w", df.GetNamespace(), df.GetName(), err)
	}
	return written.ResourceVersion, nil
}

// patchStatus writes next as the Decofile's status unless nothing changed. It changes only the
// fields this controller owns, under an optimistic lock, so the rollout controller's
// notifiedHash, rollout and PodsNotified condition are never overwritten; see StatusWriter.
// settle, when set, is the rollout's own change to the status (RolloutSettler), written with it.
func (r *Reconciler) patchStatus(ctx context.Context, df *decov1.Decofile, next *decov1.DecofileStatus, settle func(*decov1.Decofile) bool) error {
	if statusEqual(&df.Status, next, df) {
		return nil
	}
	key := types.NamespacedName{Namespace: df.Namespace, Name: df.Name}
	first := true
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := df
		if !first {
			cur = &decov1.Decofile{}
			if err := r.reader.Get(ctx, key, cur); err != nil {
				return fmt.Errorf("get Decofile %s: %w", key, err)
			}
			if cur.UID != df.UID {
				// Deleted and created again under the name: what was decided for the old one is
				// not the new one's, which gets a reconcile of its own.
				return nil
			}
		}
		first = false
		want := cur.Status.DeepCopy()
		apply(want, next, cur)
		if settle != nil {
			// The rollout's change sees the Decofile as it will be, without the content.
			d := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Generation: cur.Generation}, Status: *want}
			settle(d)
			want = &d.Status
			setReady(want, next, cur) // the rollout it recorded is Ready's to follow
		}
		rv, err := r.status.Write(ctx, cur, &cur.Status, want)
		r.written.Wrote(key, rv)
		return err
	})
}

// read gets the whole Decofile, its inline content too (which the manager's cache does not
// keep), from the API server's watch cache at a resourceVersion no older than the manager's
// cache and this controller's last status write: an answer from the watch cache costs the API
// server a fraction of a read from etcd, and an answer older than that write would make the
// controller rewrite the ConfigMap with a needless new timestamp. When there is no such
// resourceVersion, or the watch cache cannot answer, it reads from etcd.
func (r *Reconciler) read(ctx context.Context, key types.NamespacedName, df *decov1.Decofile) error {
	var rv string
	var cached decov1.Decofile
	if err := r.client.Get(ctx, key, &cached); err == nil {
		rv = cached.ResourceVersion
	}
	if written, pending := r.written.Pending(key, rv); pending {
		rv = written
	}
	if rv != "" {
		err := r.reader.Get(ctx, key, df, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: rv}})
		if err == nil || apierrors.IsNotFound(err) {
			return err
		}
	}
	return r.reader.Get(ctx, key, df)
}

// apply copies the fields this controller owns from next into s, Ready following the pods'
// confirmations s holds (setReady) for df.
func apply(s, next *decov1.DecofileStatus, df *decov1.Decofile) {
	s.ObservedGeneration = next.ObservedGeneration
	s.SourceType = next.SourceType
	s.GitHubCommit, s.ShortCommit = next.GitHubCommit, next.ShortCommit
	s.ContentHash = next.ContentHash
	s.StoredHash = next.StoredHash
	s.ConfigMapName = next.ConfigMapName
	s.S3URL = next.S3URL
	s.Format = next.Format
	s.RawBytes, s.StoredBytes = next.RawBytes, next.StoredBytes
	s.Timestamp = next.Timestamp
	s.LastUpdated = next.LastUpdated
	s.Artifact = decov1.StoredArtifact(next, next.Revision())
	s.LastHandledReconcileAt = next.LastHandledReconcileAt
	if c := meta.FindStatusCondition(next.Conditions, decov1.ConditionStalled); c != nil {
		meta.SetStatusCondition(&s.Conditions, *c)
	} else {
		meta.RemoveStatusCondition(&s.Conditions, decov1.ConditionStalled)
	}
	setReady(s, next, df)
}

func statusEqual(cur, next *decov1.DecofileStatus, df *decov1.Decofile) bool {
	probe := cur.DeepCopy()
	apply(probe, next, df)
	return equality.Semantic.DeepEqual(*probe, *cur)
}
