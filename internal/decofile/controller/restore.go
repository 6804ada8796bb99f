package controller

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
)

// restoreLastGood stores the last good content again in place of the version a progressive
// rollout rejected, when the rollout controller asks for it (Decofile.RollingBack): this
// controller owns the stored content and the status fields that describe it, so the rollback
// goes through it. The last good copy is tenant-writable (a ConfigMap, an S3 object beside the
// site's) and is checked against status.lastGood, which is not, before it is stored. next gets
// the restored content's fields; the outcome is Ready=False, Stalled=True, reason RolledBack,
// until the source gives a new version.
func (r *Reconciler) restoreLastGood(ctx context.Context, df *decov1.Decofile, next *decov1.DecofileStatus) outcome {
	lg := df.Status.LastGood
	id := df.Status.Rollout.FailedID
	ts := max(r.now().Unix(), df.Status.Timestamp+1, lg.Timestamp+1)
	if df.TargetOrDefault() == decov1.TargetS3 {
		store, ok := r.opts.S3.(lastGoodSource)
		if !ok {
			return rollbackFailed(id, fmt.Errorf("the s3 target of this operator keeps no last good copy"))
		}
		content, err := store.LoadLastGood(ctx, df, max(r.contentLimit(), lg.RawBytes))
		if err != nil {
			return rollbackFailed(id, fmt.Errorf("read the last good copy: %w", err))
		}
		if encode.Hash(content) != lg.ContentHash {
			return rollbackFailed(id, fmt.Errorf("the last good copy is not the content status.lastGood names"))
		}
		if err := r.opts.S3.Put(ctx, df, content, lg.ContentHash, ts); err != nil {
			out := fail(err)
			out.reason = ReasonStoreFailed
			return out
		}
		next.S3URL = r.opts.S3.URL(df)
	} else {
		var cm corev1.ConfigMap
		name := df.LastGoodConfigMapName()
		if err := r.reader.Get(ctx, client.ObjectKey{Namespace: df.Namespace, Name: name}, &cm); err != nil {
			if apierrors.IsNotFound(err) {
				return rollbackFailed(id, fmt.Errorf("ConfigMap %s holding the last good content is gone", name))
			}
			return outcome{reason: ReasonStoreFailed, err: fmt.Errorf("read ConfigMap %s: %w", name, err), transient: true}
		}
		value := cm.Data[keyOf(lg.Format)]
		if value == "" || encode.Hash([]byte(value)) != lg.StoredHash {
			return rollbackFailed(id, fmt.Errorf("ConfigMap %s does not hold the last good content status.lastGood names (changed outside the operator)", name))
		}
		if err := RestoreConfigMap(ctx, r.client, r.reader, df, lg.Format, value, lg.ContentHash, ts); err != nil {
			return outcome{reason: ReasonStoreFailed, err: err, transient: true}
		}
		next.ConfigMapName = df.ConfigMapName()
	}
	next.ContentHash, next.StoredHash, next.Format = lg.ContentHash, lg.StoredHash, lg.Format
	next.RawBytes, next.StoredBytes, next.Timestamp = lg.RawBytes, lg.StoredBytes, ts
	recordRevision(next, lg.SourceType, lg.SourceRevision())
	now := metav1.NewTime(r.now())
	next.LastUpdated = &now
	restored := decov1.RolloutID(next)
	return outcome{reason: decov1.ReasonRolledBack, changed: true, err: fmt.Errorf(
		"rolled back to %s (stored again at timestamp %d): %s failed its progressive rollout; the source's version is not stored again until it changes", restored, ts, id)}
}

// rollbackFailed is the outcome of a rollback whose last good content cannot be stored: the
// rejected version stays, and only a change of the source moves the Decofile on.
func rollbackFailed(id string, err error) outcome {
	return outcome{reason: decov1.ReasonRollbackFailed, err: fmt.Errorf("could not roll back %s: %w; the pods reached keep it", id, err)}
}

// lastGoodSource is an object store that keeps a last good copy beside a site's object (s3).
type lastGoodSource interface {
	LoadLastGood(ctx context.Context, df *decov1.Decofile, limit int64) ([]byte, error)
}

// RestoreConfigMap writes value, an earlier stored form of df's content (decofile.json or
// decofile.bin, as format says, whose merged JSON hashes to contentHash), back into df's
// ConfigMap with timestamp ts, exactly as the delivery controller stores content, so that it
// finds the ConfigMap intact once the status names that content. The ConfigMap is replaced only
// when it is this Decofile's: a ConfigMap owned by something else is left alone.
func RestoreConfigMap(ctx context.Context, c client.Client, r client.Reader, df *decov1.Decofile, format decov1.Format, value, contentHash string, ts int64) error {
	var cm corev1.ConfigMap
	err := r.Get(ctx, client.ObjectKey{Namespace: df.Namespace, Name: df.ConfigMapName()}, &cm)
	create := apierrors.IsNotFound(err)
	switch {
	case create:
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: df.ConfigMapName(), Namespace: df.Namespace}}
	case err != nil:
		return fmt.Errorf("read ConfigMap %s: %w", df.ConfigMapName(), err)
	default:
		if owner := metav1.GetControllerOf(&cm); owner == nil || owner.UID != df.UID {
			return fmt.Errorf("ConfigMap %s is not owned by Decofile %s; not restoring it", cm.Name, df.Name)
		}
	}
	labelStored(&cm, df, contentHash, value)
	cm.Data = map[string]string{keyOf(format): value, decov1.KeyTimestamp: strconv.FormatInt(ts, 10)}
	cm.BinaryData = nil
	if err := controllerutil.SetControllerReference(df, &cm, c.Scheme()); err != nil {
		return fmt.Errorf("own ConfigMap %s: %w", cm.Name, err)
	}
	if create {
		err = c.Create(ctx, &cm)
	} else {
		err = c.Update(ctx, &cm) // resourceVersion from the read: a concurrent write conflicts
	}
	if err != nil {
		return fmt.Errorf("restore ConfigMap %s: %w", cm.Name, err)
	}
	return nil
}

// rolledBack reports whether content of hash (or, when hash is empty, commit) is the version a
// progressive rollout rolled back: it is not stored again until the source changes.
func rolledBack(df *decov1.Decofile, hash, commit string) bool {
	ro := df.Status.Rollout
	if ro == nil || (hash == "" && commit == "") {
		return false
	}
	if hash != "" {
		return ro.FailedHash == hash
	}
	return ro.FailedCommit != "" && ro.FailedCommit == commit
}
