package rollout

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
)

// PodsNotified reasons besides the API's NotificationInProgress, NotificationSucceeded and
// NotificationFailed.
const (
	// ReasonMissingReloadToken: a pod answered 401 and its spec gives it no reload token (it was
	// created before the Decofile's injection); it must be redeployed.
	ReasonMissingReloadToken = "MissingReloadToken"
	// ReasonContentTooLarge: the stored content decodes to more than the operator stored (or than
	// the content limit), e.g. a compression bomb planted in the ConfigMap; nothing was sent.
	ReasonContentTooLarge = "ContentTooLarge"
	// ReasonInvalidStoredContent: the stored content does not decode or is not what the operator
	// stored (its hash differs from status); nothing was sent.
	ReasonInvalidStoredContent = "InvalidStoredContent"
)

// podsWithoutToken names the failed pods that answered 401 and whose spec gives them no reload
// token, re-read from the API server.
func (r *Reconciler) podsWithoutToken(ctx context.Context, df *decov1alpha1.Decofile, res notify.Result) []string {
	var out []string
	for _, p := range res.FailedPods() {
		if p.Status != http.StatusUnauthorized {
			continue
		}
		var pod corev1.Pod
		if err := r.reader.Get(ctx, client.ObjectKey{Namespace: df.Namespace, Name: p.Name}, &pod); err != nil {
			continue
		}
		if !hasReloadToken(ctx, r.reader, &pod) {
			out = append(out, p.Name)
		}
	}
	return out
}

// hasReloadToken decides from the pod's spec whether its site container got a reload token: a
// non-empty DECO_RELEASE_RELOAD_TOKEN value, a required Secret key reference (the kubelet does not
// start a container without it), or an optional reference or envFrom source that holds the key.
func hasReloadToken(ctx context.Context, r client.Reader, pod *corev1.Pod) bool {
	c := injectedContainer(pod)
	if c == nil {
		return false
	}
	for _, e := range c.Env {
		if e.Name != decov1alpha1.EnvReloadToken {
			continue
		}
		switch {
		case e.ValueFrom == nil:
			return strings.TrimSpace(e.Value) != ""
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if ref.Optional == nil || !*ref.Optional {
				return true
			}
			return secretHasKey(ctx, r, pod.Namespace, ref.Name, ref.Key)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			if ref.Optional == nil || !*ref.Optional {
				return true
			}
			return configMapHasKey(ctx, r, pod.Namespace, ref.Name, ref.Key)
		default:
			return true
		}
	}
	for _, src := range c.EnvFrom {
		if !strings.HasPrefix(decov1alpha1.EnvReloadToken, src.Prefix) {
			continue
		}
		key := strings.TrimPrefix(decov1alpha1.EnvReloadToken, src.Prefix)
		if src.SecretRef != nil && secretHasKey(ctx, r, pod.Namespace, src.SecretRef.Name, key) ||
			src.ConfigMapRef != nil && configMapHasKey(ctx, r, pod.Namespace, src.ConfigMapRef.Name, key) {
			return true
		}
	}
	return false
}

func secretHasKey(ctx context.Context, r client.Reader, ns, name, key string) bool {
	var s corev1.Secret
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		return false
	}
	_, ok := s.Data[key]
	return ok
}

func configMapHasKey(ctx context.Context, r client.Reader, ns, name, key string) bool {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
		return false
	}
	_, ok := cm.Data[key]
	return ok
}

// missingTokenMessage tells what to do about pods that have no reload token.
func missingTokenMessage(df *decov1alpha1.Decofile, pods []string) string {
	const shown = 3
	names := strings.Join(pods[:min(shown, len(pods))], ", ")
	if len(pods) > shown {
		names += fmt.Sprintf(" and %d more", len(pods)-shown)
	}
	return fmt.Sprintf("%d pod(s) answered HTTP 401 and have no reload token (%s): %s. They were started before "+
		"the Decofile's injection gave them %s from Secret %s; redeploy them (e.g. kubectl rollout restart of their "+
		"workload) so new pods get the token", len(pods), decov1alpha1.EnvReloadToken, names, decov1alpha1.EnvReloadToken, df.ReloadSecretName())
}
