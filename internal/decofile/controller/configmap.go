package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/source"
)

// configMap reads the Decofile's ConfigMap from the API server (nil when absent). A ConfigMap
// owned by another object is a ConfigMapConflict; one with no controller at all is returned with
// that error too, so that store may still adopt it when it holds exactly the built content (a
// ConfigMap written by the published operator, v0.11).
//
// Unless fresh, the manager's cache (ConfigMaps are cached metadata only) is asked first: one it
// does not have is taken as absent without a read, the common case of a new Decofile. One it
// does not have yet makes the create fail with AlreadyExists, and deliver reads again, fresh.
func (r *Reconciler) configMap(ctx context.Context, df *decov1.Decofile, fresh bool) (*corev1.ConfigMap, error) {
	key := client.ObjectKey{Namespace: df.Namespace, Name: df.ConfigMapName()}
	if !fresh {
		cached := &metav1.PartialObjectMetadata{}
		cached.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		if err := r.client.Get(ctx, key, cached); apierrors.IsNotFound(err) {
			return nil, nil
		}
	}
	var cm corev1.ConfigMap
	err := r.reader.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, &source.Error{Reason: ReasonStoreFailed, Transient: true, Err: fmt.Errorf("read ConfigMap %s: %w", df.ConfigMapName(), err)}
	}
	if owner := metav1.GetControllerOf(&cm); owner == nil || owner.UID != df.UID {
		err := &source.Error{Reason: ReasonConfigMapConflict, Err: fmt.Errorf("ConfigMap %s exists and is not owned by this Decofile; delete or rename it", cm.Name)}
		if owner == nil && df.Status.StoredHash == "" {
			return &cm, err
		}
		return nil, err
	}
	return &cm, nil
}

// adoption is a ConfigMap the operator did not write (no status.storedHash) that already holds
// the content just built: its value is kept byte for byte instead of being rewritten.
type adoption struct {
	format decov1.Format
	data   string
	ts     int64
}

// maxAdoptedTimestampSkew is how far ahead of this clock an adopted timestamp may be.
const maxAdoptedTimestampSkew = 24 * time.Hour

// adoptable reports whether cm holds exactly one stored value (decofile.json or decofile.bin)
// and a timestamp.txt, and that value decodes, within limit bytes, to JSON whose canonical
// merge hashes to hash. Anything else is rewritten as usual.
func adoptable(cm *corev1.ConfigMap, hash string, limit int64, bounds encode.Bounds) (*adoption, bool) {
	if cm == nil || len(cm.Data) != 2 || len(cm.BinaryData) != 0 {
		return nil, false
	}
	ts := timestampOf(cm)
	if ts <= 0 || ts > time.Now().Add(maxAdoptedTimestampSkew).Unix() {
		// A timestamp far ahead (written by whoever could write the ConfigMap) would pin every
		// later timestamp above it, up to overflowing.
		return nil, false
	}
	a := &adoption{ts: ts}
	if v, ok := cm.Data[decov1.KeyBin]; ok {
		a.format, a.data = decov1.FormatBin, v
	} else if v, ok := cm.Data[decov1.KeyJSON]; ok {
		a.format, a.data = decov1.FormatJSON, v
	} else {
		return nil, false
	}
	raw, err := encode.Decode(a.format, a.data, limit)
	if err != nil {
		return nil, false
	}
	var blocks map[string]json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, false
	}
	merged, err := encode.MergeWithin(blocks, bounds)
	if err != nil || encode.Hash(merged) != hash {
		return nil, false
	}
	return a, true
}

// labelStored marks cm as this operator's, for df, holding content hash stored as data. The
// annotations are information for people: what is intact is decided from status.storedHash.
func labelStored(cm *corev1.ConfigMap, df *decov1.Decofile, hash, data string) {
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	maps.Copy(cm.Labels, map[string]string{decov1.LabelManagedBy: decov1.ManagedByValue, decov1.LabelDecofile: df.Name})
	cm.Annotations[AnnotationContentHash] = hash
	cm.Annotations[AnnotationStoredHash] = encode.Hash([]byte(data))
}

// adoptConfigMap takes cm over without touching its data: it gets this operator's labels, its
// informational annotations and the Decofile as controller, so the next reconcile finds it intact.
func (r *Reconciler) adoptConfigMap(ctx context.Context, df *decov1.Decofile, cm *corev1.ConfigMap, hash string, a *adoption) error {
	labelStored(cm, df, hash, a.data)
	if metav1.GetControllerOf(cm) == nil {
		if err := controllerutil.SetControllerReference(df, cm, r.client.Scheme()); err != nil {
			return &source.Error{Reason: ReasonStoreFailed, Err: fmt.Errorf("own ConfigMap %s: %w", cm.Name, err)}
		}
	}
	if err := r.client.Update(ctx, cm); err != nil {
		return &source.Error{Reason: ReasonStoreFailed, Transient: true, Err: fmt.Errorf("adopt ConfigMap %s: %w", cm.Name, err)}
	}
	return nil
}

// isIntact reports whether cm holds exactly what the operator stored, as the status (which
// tenants cannot write) records it: the stored value whose SHA-256 is status.storedHash,
// timestamp.txt, nothing else, and the informational annotations as written.
func isIntact(cm *corev1.ConfigMap, s *decov1.DecofileStatus) bool {
	if cm == nil || s.StoredHash == "" || s.ContentHash == "" {
		return false
	}
	data, ok := cm.Data[keyOf(s.Format)]
	if !ok || encode.Hash([]byte(data)) != s.StoredHash {
		return false
	}
	if len(cm.Data) != 2 || len(cm.BinaryData) != 0 {
		return false // a stale decofile.json next to decofile.bin, or anything added
	}
	if cm.Annotations[AnnotationContentHash] != s.ContentHash || cm.Annotations[AnnotationStoredHash] != s.StoredHash {
		return false
	}
	return timestampOf(cm) == s.Timestamp
}

func timestampOf(cm *corev1.ConfigMap) int64 {
	if cm == nil {
		return 0
	}
	ts, _ := strconv.ParseInt(strings.TrimSpace(cm.Data[decov1.KeyTimestamp]), 10, 64)
	return ts
}

// writeConfigMap creates or replaces the ConfigMap's data with res at timestamp ts.
func (r *Reconciler) writeConfigMap(ctx context.Context, df *decov1.Decofile, cm *corev1.ConfigMap, res *encode.Result, hash string, ts int64) error {
	create := cm == nil
	if create {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: df.ConfigMapName(), Namespace: df.Namespace}}
	}
	labelStored(cm, df, hash, res.Data)
	// Replace the whole data: a stale decofile.bin next to a new decofile.json would be loaded.
	cm.Data = map[string]string{res.Key: res.Data, decov1.KeyTimestamp: strconv.FormatInt(ts, 10)}
	cm.BinaryData = nil
	if err := controllerutil.SetControllerReference(df, cm, r.client.Scheme()); err != nil {
		return &source.Error{Reason: ReasonStoreFailed, Err: fmt.Errorf("own ConfigMap %s: %w", cm.Name, err)}
	}
	var err error
	if create {
		err = r.client.Create(ctx, cm)
	} else {
		err = r.client.Update(ctx, cm) // resourceVersion from the read: a concurrent change conflicts
	}
	if err != nil {
		if apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsInvalid(err) {
			return &source.Error{Reason: decov1.ReasonTooLarge, Err: fmt.Errorf("the API server refused ConfigMap %s (%d bytes stored): %w; use spec.target: s3", cm.Name, res.StoredBytes(), err)}
		}
		return &source.Error{Reason: ReasonStoreFailed, Transient: true, Err: fmt.Errorf("write ConfigMap %s: %w", cm.Name, err)}
	}
	return nil
}
