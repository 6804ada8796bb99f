package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/shard"
)

// IndexSourceRef indexes Decofiles by what they follow (each source kind's Keys: a repository
// and branch or tag, a Flux source object), so a push or a changed Flux source finds its
// Decofiles without listing every one.
const IndexSourceRef = "deco.sites/source-ref"

// DefaultPushMaxPerNamespace is how many Decofiles of one namespace one push reconciles at once.
const DefaultPushMaxPerNamespace = 50

// PushTrigger reconciles at once the Decofiles that follow a pushed repository and ref. On the
// leader it hands them to the delivery controller's queue, which runs them with the
// controller's bounded concurrency and never queues one Decofile twice; a replica that is not
// the leader sets the deco.sites/reconcile-requested-at annotation instead, which the leader
// watches.
type PushTrigger struct {
	cache   client.Reader
	writer  client.Client
	elected <-chan struct{}
	events  chan event.GenericEvent
	// maxPerNamespace bounds how many Decofiles of one namespace a push reconciles: a tenant
	// that makes many Decofiles follow a busy repository cannot fill the queue with them.
	maxPerNamespace int
	// shard selects the Decofiles this replica's controller reconciles once elected; the others
	// are handed to their shard's leader through the API.
	shard shard.Selector
	now   func() time.Time
}

// NewPushTrigger registers the source index with mgr's cache and returns the trigger to pass
// to Setup (Options.Push) and to the push receiver. maxPerNamespace <= 0 means
// DefaultPushMaxPerNamespace.
func NewPushTrigger(ctx context.Context, mgr manager.Manager, maxPerNamespace int, sel shard.Selector) (*PushTrigger, error) {
	if err := indexSources(ctx, mgr); err != nil {
		return nil, err
	}
	if maxPerNamespace <= 0 {
		maxPerNamespace = DefaultPushMaxPerNamespace
	}
	return &PushTrigger{
		cache:           mgr.GetCache(),
		writer:          mgr.GetClient(),
		elected:         mgr.Elected(),
		events:          make(chan event.GenericEvent, 1024),
		maxPerNamespace: maxPerNamespace,
		shard:           sel,
		now:             time.Now,
	}, nil
}

// source feeds the delivery controller.
func (t *PushTrigger) source() source.Source {
	return source.Channel(t.events, &handler.EnqueueRequestForObject{})
}

// Trigger asks for a reconcile of every Decofile indexed under one of keys and returns how
// many.
func (t *PushTrigger) Trigger(ctx context.Context, keys []string) (int, error) {
	found := map[client.ObjectKey]*decov1.Decofile{}
	perNamespace := map[string]int{}
	skipped := 0
	for _, k := range keys {
		var list decov1.DecofileList
		if err := t.cache.List(ctx, &list, client.MatchingFields{IndexSourceRef: k}); err != nil {
			return 0, fmt.Errorf("list the Decofiles following %s: %w", k, err)
		}
		for i := range list.Items {
			df := &list.Items[i]
			key := client.ObjectKeyFromObject(df)
			if found[key] != nil {
				continue
			}
			if perNamespace[df.Namespace] >= t.maxPerNamespace {
				skipped++
				continue
			}
			perNamespace[df.Namespace]++
			found[key] = df
		}
	}
	if skipped > 0 {
		logf.FromContext(ctx).Info("push reached the per-namespace bound; the rest follow at their interval", "skipped", skipped, "maxPerNamespace", t.maxPerNamespace)
	}
	elected := false
	select {
	case <-t.elected:
		elected = true
	default:
	}
	var elsewhere []*decov1.Decofile
	for _, df := range found {
		if !elected || !t.shard.Owns(df) {
			elsewhere = append(elsewhere, df)
			continue
		}
		select {
		case t.events <- event.GenericEvent{Object: df}:
		case <-ctx.Done():
			return 0, fmt.Errorf("queue the Decofiles: %w", ctx.Err())
		}
	}
	if len(elsewhere) > 0 {
		// This replica's controller is not running, or another shard reconciles them: ask
		// their leader through the API.
		var errs []error
		value := t.now().UTC().Format(time.RFC3339Nano)
		for _, df := range elsewhere {
			orig := df.DeepCopy()
			if df.Annotations == nil {
				df.Annotations = map[string]string{}
			}
			df.Annotations[decov1.AnnotationReconcileRequestedAt] = value
			if err := t.writer.Patch(ctx, df, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("annotate Decofile %s: %w", client.ObjectKeyFromObject(df), err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
	}
	return len(found), nil
}
