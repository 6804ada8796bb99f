package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
)

// fetch retrieves the blocks. It first resolves the source's revision; when that revision is
// the one already stored for this generation and the stored content is intact it returns
// cached=true without downloading anything (seed flow 2: the revision is the cache key). A kind
// without revisions (inline) is always read.
func (r *Reconciler) fetch(ctx context.Context, df *decov1.Decofile, intact bool) (blocks source.Blocks, revision string, cached bool, err error) {
	ctx = source.WithTenant(ctx, df.Namespace) // one tenant's slow remotes hold few slots of a shared host
	k, err := r.sources.For(df)
	if err != nil {
		return nil, "", false, err
	}
	res, err := k.Resolve(ctx, df)
	if err != nil {
		return nil, "", false, err
	}
	if rev := res.Revision; rev != "" {
		if intact && rev == df.Status.Revision() && df.Status.ObservedGeneration == df.Generation && df.Status.ContentStored() {
			return nil, rev, true, nil
		}
		if r.isRejected(df, rev) || rolledBack(df, "", rev) {
			return nil, rev, false, errRejected
		}
	}
	blocks, err = res.Download(ctx)
	return blocks, res.Revision, false, err
}

func (r *Reconciler) isRejected(df *decov1.Decofile, sha string) bool {
	v, ok := r.rejected.Load(types.NamespacedName{Namespace: df.Namespace, Name: df.Name})
	return ok && v.(rejectedCommit) == rejectedCommit{generation: df.Generation, sha: sha}
}
