package inject

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// IndexDeploymentID indexes Decofiles in the manager's cache by their deploymentId (or name,
// when unset), so the injection webhook finds a workload's Decofile without listing the
// namespace's. Setup registers it.
const IndexDeploymentID = "deco.sites/deployment-id"

// DeploymentIDIndexValue is the value IndexDeploymentID files a Decofile under.
func DeploymentIDIndexValue(o client.Object) []string {
	d, ok := o.(*decov1.Decofile)
	if !ok {
		return nil
	}
	return []string{d.DeploymentIDOrName()}
}

// Bounds of the reads of the API server that stand in for the cache when it has not seen an
// object yet. An object read whole is at most what the API server stores (about 1.5 MiB); its
// metadata alone can be half of that (256 KiB of annotations, managedFields naming every key).
const (
	// liveSlots is how many reads of the API server (other than the namespace) the webhook
	// makes at once; more wait, so however many admissions arrive together, what the replica
	// holds of them stays bounded.
	liveSlots = 4
	// listPage is how many Decofiles' metadata one page of the live list holds.
	listPage = 20
	// listMax is how many Decofiles' metadata the live list reads at most; past it, the
	// rest of the namespace is taken to be in the cache.
	listMax = 1000
	// maxLiveGets is how many whole Decofiles one admission reads from the API server at most.
	maxLiveGets = 4
	// cacheWait is how long an admission waits for the cache to catch up with Decofiles it has
	// not seen before reading them from the API server.
	cacheWait = time.Second
	// cachePoll is how often it looks while it waits.
	cachePoll = 25 * time.Millisecond
)

// errNotCaughtUp says the cache is behind by more than an admission may read live.
var errNotCaughtUp = errors.New("the webhook's cache has not caught up with them: retry in a moment")

// live runs read, one read of the API server, in one of the liveSlots: it waits, as long as
// the request may, while they are all taken.
func (h *Injector) live(ctx context.Context, read func() error) error {
	h.slotsOnce.Do(func() { h.slots = make(chan struct{}, liveSlots) })
	select {
	case h.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait to read the API server: %w", ctx.Err())
	}
	defer func() { <-h.slots }()
	return read()
}

// cacheReader is where Decofiles and Secret metadata are read first: the cache, or without one
// the API server.
func (h *Injector) cacheReader() client.Reader {
	if h.Cache != nil {
		return h.Cache
	}
	return h.Reader
}

// fromCache runs read against the cache; when the cache has not started yet (a replica just
// came up) it waits, as long as the request may, until it has synced and runs read again.
func (h *Injector) fromCache(ctx context.Context, read func(client.Reader) error) error {
	r := h.cacheReader()
	err := read(r)
	var notStarted *cache.ErrCacheNotStarted
	if errors.As(err, &notStarted) {
		if w, ok := r.(interface{ WaitForCacheSync(context.Context) bool }); ok && w.WaitForCacheSync(ctx) {
			return read(r)
		}
	}
	return err
}

// decofileNamed reads the Decofile namespace/name: from the cache, else (a Decofile created a
// moment ago) with one read of it from the API server. It returns nil when there is none.
func (h *Injector) decofileNamed(ctx context.Context, namespace, name string) (*decov1.Decofile, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	d := &decov1.Decofile{}
	err := h.fromCache(ctx, func(r client.Reader) error { return r.Get(ctx, key, d) })
	if apierrors.IsNotFound(err) && h.Cache != nil {
		err = h.live(ctx, func() error { return h.Reader.Get(ctx, key, d) })
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read Decofile %s/%s: %w", namespace, name, err)
	}
	if d.Spec.Inline != nil {
		d.Spec.Inline = &decov1.InlineSource{} // read live: not needed past here
	}
	return d, nil
}

// decofilesWithDeploymentID returns the Decofiles of namespace whose deploymentId (or name) is
// id. The cache's index answers; when it has none, the Decofiles the cache has not seen yet are
// looked for in the API server: the metadata of the namespace's Decofiles is listed, in pages,
// and those missing from the cache are waited for (cacheWait), then read one by one, at most
// maxLiveGets of them.
func (h *Injector) decofilesWithDeploymentID(ctx context.Context, namespace, id string) ([]decov1.Decofile, error) {
	if h.Cache == nil {
		return h.liveDecofiles(ctx, namespace, id, nil)
	}
	indexed := func() ([]decov1.Decofile, error) {
		list := &decov1.DecofileList{}
		err := h.fromCache(ctx, func(r client.Reader) error {
			return r.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{IndexDeploymentID: id})
		})
		if err != nil {
			return nil, fmt.Errorf("list Decofiles with deploymentId %q in %s from the cache: %w", id, namespace, err)
		}
		return list.Items, nil
	}
	if found, err := indexed(); err != nil || len(found) > 0 {
		return found, err
	}
	unseen, err := h.unseen(ctx, namespace)
	if err != nil || len(unseen) == 0 {
		return nil, err
	}
	// A Decofile applied in the same breath as the workload: the cache has it within
	// milliseconds, usually.
	deadline := time.Now().Add(cacheWait)
	for {
		for name, uid := range unseen {
			if h.cached(ctx, namespace, name, uid) {
				delete(unseen, name)
			}
		}
		if len(unseen) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the cache to see the Decofiles of %s: %w", namespace, ctx.Err())
		case <-time.After(cachePoll):
		}
	}
	found, err := indexed()
	if err != nil || len(unseen) == 0 {
		return found, err
	}
	return h.liveDecofiles(ctx, namespace, id, unseen)
}

// liveDecofiles reads the named Decofiles (all of namespace when names is nil) from the API
// server, at most maxLiveGets, and returns those whose deploymentId (or name) is id.
func (h *Injector) liveDecofiles(ctx context.Context, namespace, id string, names map[string]types.UID) ([]decov1.Decofile, error) {
	if names == nil {
		var err error
		if names, err = h.unseen(ctx, namespace); err != nil {
			return nil, err
		}
	}
	if len(names) > maxLiveGets {
		return nil, fmt.Errorf("namespace %s has %d Decofiles new to this webhook (at most %d are read at once): %w", namespace, len(names), maxLiveGets, errNotCaughtUp)
	}
	var found []decov1.Decofile
	for name := range names {
		d := &decov1.Decofile{}
		key := types.NamespacedName{Namespace: namespace, Name: name}
		if err := h.live(ctx, func() error { return h.Reader.Get(ctx, key, d) }); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("read Decofile %s/%s: %w", namespace, name, err)
		}
		if d.DeploymentIDOrName() == id {
			if d.Spec.Inline != nil {
				d.Spec.Inline = &decov1.InlineSource{} // not needed past here
			}
			found = append(found, *d)
		}
	}
	return found, nil
}

// unseen lists the metadata of namespace's Decofiles from the API server, in pages, and returns
// the names (with UIDs) of those the cache does not hold. It reads at most listMax; the rest are
// taken to be in the cache.
func (h *Injector) unseen(ctx context.Context, namespace string) (map[string]types.UID, error) {
	out := map[string]types.UID{}
	token := ""
	for read := 0; read < listMax; {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(decov1.GroupVersion.WithKind("DecofileList"))
		err := h.live(ctx, func() error {
			return h.Reader.List(ctx, list, client.InNamespace(namespace), client.Limit(listPage), client.Continue(token))
		})
		if err != nil {
			return nil, fmt.Errorf("list Decofiles in %s: %w", namespace, err)
		}
		for i := range list.Items {
			it := &list.Items[i]
			if h.Cache == nil || !h.cached(ctx, namespace, it.Name, it.UID) {
				out[it.Name] = it.UID
			}
		}
		read += len(list.Items)
		if token = list.Continue; token == "" {
			break
		}
	}
	return out, nil
}

// cached reports whether the cache holds the Decofile namespace/name with uid.
func (h *Injector) cached(ctx context.Context, namespace, name string, uid types.UID) bool {
	d := &decov1.Decofile{}
	err := h.Cache.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, d, client.UnsafeDisableDeepCopy)
	return err == nil && d.UID == uid
}

// secretExists reports whether the Secret namespace/name exists, from the metadata the cache
// holds, else from the Secret's metadata in the API server (one created a moment ago).
func (h *Injector) secretExists(ctx context.Context, namespace, name string) (bool, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	s := &metav1.PartialObjectMetadata{}
	s.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := h.fromCache(ctx, func(r client.Reader) error { return r.Get(ctx, key, s) })
	if apierrors.IsNotFound(err) && h.Cache != nil {
		err = h.live(ctx, func() error { return h.Reader.Get(ctx, key, s) })
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
