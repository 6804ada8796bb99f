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
)

// RestoreConfigMap writes value, an earlier stored form of df's content (decofile.json or
// decofile.bin, as format says, whose merged JSON hashes to contentHash), back into df's
// ConfigMap with timestamp ts, exactly as the delivery controller stores content, so that it
// finds the ConfigMap intact once the status names that content. The rollout controller uses it
// to roll back a version a progressive rollout rejected. The ConfigMap is replaced only when it
// is this Decofile's: a ConfigMap owned by something else is left alone.
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
