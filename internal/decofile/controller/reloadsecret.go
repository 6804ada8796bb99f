package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/workload"
)

// AnnotationRestartPending on a reload Secret says the workloads using it still have to be
// restarted (it was recreated with a new token); removed once they were.
const AnnotationRestartPending = "deco.sites/reload-token-restart-pending"

// ensureReloadSecret creates the Decofile's reload Secret with a random token when it does not
// exist. An existing Secret is never changed: running pods hold its token. When the Secret was
// there before (the Decofile was reconciled already) and someone deleted it, the new token is
// not the one running pods hold, so the workloads using it are restarted; the new Secret carries
// AnnotationRestartPending until that succeeded, so a failed restart is tried again on the next
// reconcile. A failed restart never holds up delivery: it is reported and retried.
//
// Whether it exists is looked up in the manager's cache (Secrets are cached metadata only): one
// the cache does not have yet is found by the create failing with AlreadyExists, and one deleted
// that the cache still has is recreated on the reconcile its deletion queues.
func (r *Reconciler) ensureReloadSecret(ctx context.Context, df *decov1.Decofile) error {
	name := df.ReloadSecretName()
	cached := &metav1.PartialObjectMetadata{}
	cached.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.client.Get(ctx, client.ObjectKey{Namespace: df.Namespace, Name: name}, cached)
	if err == nil {
		if cached.Annotations[AnnotationRestartPending] == "" {
			return nil
		}
		// Read again from the API server: the cache may not have the restart that cleared it yet.
		if err := r.reader.Get(ctx, client.ObjectKeyFromObject(cached), cached); err != nil {
			if apierrors.IsNotFound(err) {
				return nil // deleted since: its deletion queues the reconcile that recreates it
			}
			return fmt.Errorf("read reload Secret %s: %w", name, err)
		}
		if cached.Annotations[AnnotationRestartPending] != "" {
			r.restartPending(ctx, df, cached)
		}
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("read reload Secret %s: %w", name, err)
	}
	var s corev1.Secret
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return fmt.Errorf("generate reload token: %w", err)
	}
	s = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: df.Namespace, Labels: map[string]string{decov1.LabelManagedBy: decov1.ManagedByValue, decov1.LabelDecofile: df.Name}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{decov1.ReloadTokenKey: []byte(hex.EncodeToString(buf))},
	}
	// Only after this operator delivered the Decofile (a stored ConfigMap or a rollout): before
	// that no pod can have started with an earlier token of ours. observedGeneration alone is no
	// proof: the published operator (v0.11) writes it too, and a tanstack-kv Decofile gets it
	// without ever being delivered.
	replaced := df.Status.ObservedGeneration != 0 &&
		(df.Status.StoredHash != "" || df.Status.NotifiedHash != "" || df.Status.Rollout != nil)
	if replaced {
		s.Annotations = map[string]string{AnnotationRestartPending: "true"}
	}
	if err := controllerutil.SetControllerReference(df, &s, r.client.Scheme()); err != nil {
		return fmt.Errorf("own reload Secret %s: %w", name, err)
	}
	if err := r.client.Create(ctx, &s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("create reload Secret %s: %w", name, err)
	}
	if replaced {
		r.restartPending(ctx, df, &s)
	}
	return nil
}

// restartPending restarts the workloads using the recreated Secret s and clears its
// AnnotationRestartPending; failures are reported and left for the next reconcile.
func (r *Reconciler) restartPending(ctx context.Context, df *decov1.Decofile, s client.Object) {
	log := logf.FromContext(ctx)
	if err := r.restartWorkloads(ctx, df); err != nil {
		log.Error(err, "restart the workloads using the recreated reload Secret; retried on the next reconcile")
		return
	}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}}}`, AnnotationRestartPending))
	if err := r.client.Patch(ctx, s, patch); err != nil && !apierrors.IsNotFound(err) {
		log.Error(err, "clear the restart-pending annotation of the reload Secret; the workloads may be restarted once more")
	}
}

// restartWorkloads restarts the pods of the workloads injected with df (labelled with its name
// by the injection webhook) by setting AnnotationRestartedAt on their pod templates, as
// `kubectl rollout restart` does. It runs after the reload Secret was recreated with a new
// token: pods read DECO_RELEASE_RELOAD_TOKEN once at start, so running ones would answer every
// later push with 401. The token itself cannot be kept: nothing the operator may read holds it
// once the Secret is gone (pods reference it; their spec does not contain it).
func (r *Reconciler) restartWorkloads(ctx context.Context, df *decov1.Decofile) error {
	at := r.now().UTC().Format(time.RFC3339)
	var restarted, failed []string
	var errs []error
	ws, err := r.workloads.List(ctx, df.Namespace, client.MatchingLabels{decov1.LabelDecofile: df.Name})
	if err != nil {
		errs = append(errs, err)
	}
	for i := range ws {
		w := &ws[i]
		if err := workload.Restart(ctx, r.client, w, AnnotationRestartedAt, at); err != nil {
			errs = append(errs, err)
			failed = append(failed, workload.Name(w))
			continue
		}
		restarted = append(restarted, workload.Name(w))
	}
	slices.Sort(restarted)
	if len(restarted) > 0 || len(errs) > 0 {
		msg := "none"
		if len(restarted) > 0 {
			msg = strings.Join(restarted, ", ")
		}
		if len(errs) > 0 {
			msg += fmt.Sprintf("; %d failed (%s), retried on the next reconcile", len(errs), strings.Join(failed, ", "))
		}
		r.recorder.Eventf(df, nil, corev1.EventTypeWarning, ReasonReloadTokenRecreated, "Restart",
			"reload Secret %s was deleted and recreated with a new token; restarted the workloads using it so their pods get it: %s", df.ReloadSecretName(), msg)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("reload Secret %s was recreated with a new token; restart its workloads: %w", df.ReloadSecretName(), err)
	}
	return nil
}
