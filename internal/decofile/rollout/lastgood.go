package rollout

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
)

// LastGoodConfigMapName is the ConfigMap keeping the last content every pod confirmed under
// spec.rollout (Decofile.LastGoodConfigMapName).
func LastGoodConfigMapName(df *decov1alpha1.Decofile) string { return df.LastGoodConfigMapName() }

// errNoLastGood says there is no intact copy of earlier content to roll back to.
var errNoLastGood = errors.New("no last good content kept")

// LastGoodStore is implemented by the Loader of a target that keeps content outside the
// Decofile's ConfigMap (s3): it keeps a copy of the content every pod confirmed under
// spec.rollout and puts it back when a progressive rollout rolls back. What it reads back is
// checked against status.lastGood like the ConfigMap copy.
type LastGoodStore interface {
	// KeepLastGood stores content (which hashes to hash, stored at timestamp ts) as df's last
	// good copy, replacing the previous one.
	KeepLastGood(ctx context.Context, df *decov1alpha1.Decofile, content []byte, hash string, ts int64) error
	// LoadLastGood reads df's last good copy back, at most limit bytes.
	LoadLastGood(ctx context.Context, df *decov1alpha1.Decofile, limit int64) ([]byte, error)
	// Restore stores content again as df's content, under timestamp ts.
	Restore(ctx context.Context, df *decov1alpha1.Decofile, content []byte, hash string, ts int64) error
}

// lastGoodStore is the LastGoodStore of df's target, when that target is not the ConfigMap.
func (r *Reconciler) lastGoodStore(df *decov1alpha1.Decofile) (LastGoodStore, bool) {
	if df.TargetOrDefault() == decov1alpha1.TargetConfigMap {
		return nil, false
	}
	s, ok := r.opts.Loaders[df.TargetOrDefault()].(LastGoodStore)
	return s, ok
}

// keepsLastGood reports whether df's target can keep a last good copy.
func (r *Reconciler) keepsLastGood(df *decov1alpha1.Decofile) bool {
	if df.TargetOrDefault() == decov1alpha1.TargetConfigMap {
		return true
	}
	_, ok := r.lastGoodStore(df)
	return ok
}

// keepLastGood keeps df's content as the last good one when every pod confirmed it
// (status.notifiedHash == status.contentHash) under spec.rollout and it is not kept yet: for a
// Decofile that has just been given spec.rollout, or whose last rollout ended while the copy
// could not be written.
func (r *Reconciler) keepLastGood(ctx context.Context, df *decov1alpha1.Decofile) error {
	s := &df.Status
	if df.Spec.Rollout == nil || !r.keepsLastGood(df) || s.ContentHash == "" || s.ContentHash != s.NotifiedHash {
		return nil
	}
	if lg := s.LastGood; lg != nil && lg.ContentHash == s.ContentHash && lg.StoredHash == s.StoredHash {
		return nil
	}
	return r.saveLastGood(ctx, client.ObjectKeyFromObject(df), s.ContentHash)
}

// saveLastGood copies the stored form of content hash, which every pod confirmed, into the
// last-good ConfigMap and records it as status.lastGood, so a later progressive rollout can
// restore it. The copy is the stored value itself (decofile.json, or decofile.bin already
// compressed), so it fits wherever the original did; it is verified against status.storedHash
// before it is copied. A target with a LastGoodStore (s3) keeps its copy there instead.
func (r *Reconciler) saveLastGood(ctx context.Context, key client.ObjectKey, hash string) error {
	var df decov1alpha1.Decofile
	if err := r.reader.Get(ctx, key, &df); err != nil {
		return client.IgnoreNotFound(err)
	}
	s := &df.Status
	store, other := r.lastGoodStore(&df)
	if df.Spec.Rollout == nil || !r.keepsLastGood(&df) || s.ContentHash != hash || (s.StoredHash == "" && !other) {
		return nil
	}
	if lg := s.LastGood; lg != nil && lg.ContentHash == s.ContentHash && lg.StoredHash == s.StoredHash {
		return nil
	}
	if other {
		return r.saveLastGoodCopy(ctx, &df, store)
	}
	var cm corev1.ConfigMap
	name := df.ConfigMapName()
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: df.Namespace, Name: name}, &cm); err != nil {
		return fmt.Errorf("read ConfigMap %s to keep the last good content: %w", name, err)
	}
	k, value := storedValue(&cm, s.Format)
	if err := verifyStored(value, s.StoredHash); err != nil || value == "" {
		return fmt.Errorf("ConfigMap %s: %s is not what the operator stored; not keeping it", name, k)
	}
	kept := &decov1alpha1.StoredContent{ContentHash: s.ContentHash, StoredHash: s.StoredHash, Format: s.Format,
		Timestamp: s.Timestamp, RawBytes: s.RawBytes, StoredBytes: s.StoredBytes, SourceType: s.SourceType, GitHubCommit: s.GitHubCommit, Revision: s.Revision()}
	if kept.Format == "" {
		kept.Format = decov1alpha1.FormatJSON
		if k == decov1alpha1.KeyBin {
			kept.Format = decov1alpha1.FormatBin
		}
	}
	if err := r.writeLastGood(ctx, &df, k, value, kept.Timestamp); err != nil {
		return err
	}
	return r.patchStatus(ctx, key, func(d *decov1alpha1.Decofile) bool {
		if d.Status.ContentHash != kept.ContentHash {
			return false // changed meanwhile; the next confirmed content is kept instead
		}
		d.Status.LastGood = kept
		return true
	})
}

// saveLastGoodCopy is saveLastGood for a target with a LastGoodStore: the stored content is read
// back through the target's Loader, which checks it against status.contentHash, and those bytes
// are what the store keeps.
func (r *Reconciler) saveLastGoodCopy(ctx context.Context, df *decov1alpha1.Decofile, store LastGoodStore) error {
	s := &df.Status
	content, err := r.load(ctx, r.opts.Loaders[df.TargetOrDefault()], df)
	if err != nil {
		return fmt.Errorf("read the stored content to keep it as the last good one: %w", err)
	}
	if err := store.KeepLastGood(ctx, df, content.JSON, s.ContentHash, s.Timestamp); err != nil {
		return err
	}
	kept := &decov1alpha1.StoredContent{ContentHash: s.ContentHash, StoredHash: s.StoredHash, Format: decov1alpha1.FormatJSON,
		Timestamp: s.Timestamp, RawBytes: s.RawBytes, StoredBytes: s.StoredBytes, SourceType: s.SourceType, GitHubCommit: s.GitHubCommit, Revision: s.Revision()}
	return r.patchStatus(ctx, client.ObjectKeyFromObject(df), func(d *decov1alpha1.Decofile) bool {
		if d.Status.ContentHash != kept.ContentHash {
			return false
		}
		d.Status.LastGood = kept
		return true
	})
}

// writeLastGood creates or replaces the last-good ConfigMap. One that the Decofile does not
// own is left alone: whoever made it is not the operator.
func (r *Reconciler) writeLastGood(ctx context.Context, df *decov1alpha1.Decofile, key, value string, ts int64) error {
	name := LastGoodConfigMapName(df)
	var cm corev1.ConfigMap
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: df.Namespace, Name: name}, &cm)
	create := apierrors.IsNotFound(err)
	switch {
	case create:
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: df.Namespace}}
	case err != nil:
		return fmt.Errorf("read ConfigMap %s: %w", name, err)
	default:
		if owner := metav1.GetControllerOf(&cm); owner == nil || owner.UID != df.UID {
			return fmt.Errorf("ConfigMap %s exists and is not owned by Decofile %s; delete it so the last good content can be kept", name, df.Name)
		}
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[decov1alpha1.LabelManagedBy] = decov1alpha1.ManagedByValue
	cm.Data = map[string]string{key: value, decov1alpha1.KeyTimestamp: strconv.FormatInt(ts, 10)}
	cm.BinaryData = nil
	if err := controllerutil.SetControllerReference(df, &cm, r.client.Scheme()); err != nil {
		return fmt.Errorf("own ConfigMap %s: %w", name, err)
	}
	if create {
		err = r.client.Create(ctx, &cm)
	} else {
		err = r.client.Update(ctx, &cm)
	}
	if err != nil {
		return fmt.Errorf("write ConfigMap %s: %w", name, err)
	}
	return nil
}

// lastGood reads the kept content back: the ConfigMap is tenant-writable, so it is loaded like
// the stored content, checked against status.lastGood (stored hash before decoding, size, hash);
// a LastGoodStore's copy is checked against its size and hash the same way.
// It returns the JSON and the stored value (to restore as it was).
func (r *Reconciler) lastGood(ctx context.Context, df *decov1alpha1.Decofile) (*decov1alpha1.StoredContent, []byte, string, error) {
	lg := df.Status.LastGood
	if lg == nil || lg.ContentHash == "" {
		return nil, nil, "", errNoLastGood
	}
	if store, ok := r.lastGoodStore(df); ok {
		limit := ContentLimit(&decov1alpha1.Decofile{Status: decov1alpha1.DecofileStatus{RawBytes: lg.RawBytes}}, r.opts.MaxContentBytes)
		content, err := store.LoadLastGood(ctx, df, limit)
		if err != nil {
			return nil, nil, "", fmt.Errorf("%w: %w", errNoLastGood, err)
		}
		if err := VerifyHash(encode.Hash(content), lg.ContentHash); err != nil {
			return nil, nil, "", fmt.Errorf("%w: the last good copy: %w", errNoLastGood, err)
		}
		return lg, content, string(content), nil
	}
	probe := &decov1alpha1.Decofile{ObjectMeta: df.ObjectMeta, Status: decov1alpha1.DecofileStatus{
		ConfigMapName: LastGoodConfigMapName(df), ContentHash: lg.ContentHash, StoredHash: lg.StoredHash,
		Format: lg.Format, RawBytes: lg.RawBytes, Timestamp: lg.Timestamp}}
	content, err := r.load(ctx, ConfigMapLoader{Reader: r.reader}, probe)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%w: %w", errNoLastGood, err)
	}
	var cm corev1.ConfigMap
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: df.Namespace, Name: probe.Status.ConfigMapName}, &cm); err != nil {
		return nil, nil, "", fmt.Errorf("%w: read ConfigMap %s: %w", errNoLastGood, probe.Status.ConfigMapName, err)
	}
	_, value := storedValue(&cm, lg.Format)
	if encode.Hash([]byte(value)) != lg.StoredHash {
		return nil, nil, "", fmt.Errorf("%w: ConfigMap %s changed while it was read", errNoLastGood, probe.Status.ConfigMapName)
	}
	return lg, content.JSON, value, nil
}
