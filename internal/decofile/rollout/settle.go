package rollout

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
)

// Settler is the delivery controller's RolloutSettler: when new content is stored for a
// Decofile that has no pod, its rollout (nothing to send) is recorded in the delivery's status
// write, as the rollout controller would record it in a write of its own right after.
type Settler struct {
	// Reader lists pods from the API server: a listing made after the content was stored holds
	// every pod that could have started with older content; any later pod starts with this.
	Reader client.Reader
}

// Settle returns the change recording the rollout of next.ContentHash as done when df takes
// plain (not progressive) rollouts, is not silent, and has no pod; nil otherwise. A Decofile
// whose last rollout had pods is left to the rollout controller without a listing: it most
// likely has pods still, and the rollout lists them anyway.
func (s Settler) Settle(ctx context.Context, df *decov1alpha1.Decofile, next *decov1alpha1.DecofileStatus) (func(*decov1alpha1.Decofile) bool, error) {
	hash := next.ContentHash
	if df.Spec.Silent || df.Spec.Rollout != nil || !df.TargetOrDefault().Supported() ||
		hash == "" || hash == next.NotifiedHash {
		return nil, nil
	}
	if ro := next.Rollout; ro != nil && (ro.Total > 0 || ro.FailedHash == hash) {
		return nil, nil
	}
	if has, err := hasPods(ctx, s.Reader, df); err != nil || has {
		return nil, err
	}
	var counted sync.Once // the change is made again when the write is retried
	return func(d *decov1alpha1.Decofile) bool {
		if !d.Status.ContentStored() || d.Status.ContentHash != hash || d.Status.NotifiedHash == hash {
			return false
		}
		counted.Do(rolloutsTotal.WithLabelValues("succeeded").Inc)
		id := decov1alpha1.RolloutID(&d.Status)
		now := metav1.Now()
		return then(beginRollout(id, 0, &now), confirmed(id, hash, notify.Progress{}, nil, now, now))(d)
	}, nil
}

// hasPods reports whether any pod is selected for df (see selectPods), listing at most one
// pod's metadata per selector. The selectors are listed at once: each consistent list waits for
// the API server's cache to catch up, and this wait is in the delivery's path.
func hasPods(ctx context.Context, r client.Reader, df *decov1alpha1.Decofile) (bool, error) {
	selectors := podSelectors(df)
	found := make([]bool, len(selectors))
	g, ctx := errgroup.WithContext(ctx)
	for i, sel := range selectors {
		g.Go(func() error {
			var list metav1.PartialObjectMetadataList
			list.SetGroupVersionKind(podListGVK)
			if err := r.List(ctx, &list, client.InNamespace(df.Namespace), sel, client.Limit(1)); err != nil {
				return fmt.Errorf("list pods %v: %w", map[string]string(sel), err)
			}
			found[i] = len(list.Items) > 0
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return false, err
	}
	return slices.Contains(found, true), nil
}
