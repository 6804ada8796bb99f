package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
)

// ObjectStore keeps the merged JSON of s3-target Decofiles (package s3target).
type ObjectStore interface {
	// URL is the public URL pods load df's object from; the webhook injects the same one.
	URL(df *decov1.Decofile) string
	// Describe names df's object for messages (s3://bucket/key).
	Describe(df *decov1.Decofile) string
	// Put uploads body as df's object. Failures are *source.Error with an S3 reason.
	Put(ctx context.Context, df *decov1.Decofile, body []byte, hash string, ts int64) error
}

// deliverS3 is deliver for spec.target: s3. The gate is the seed's: for git and github sources
// the unchanged-commit short-circuit first, then the SHA-256 of the merged JSON against
// status.contentHash; only a change (or an object not yet at the current URL) uploads. There is
// no size limit and no compression.
func (r *Reconciler) deliverS3(ctx context.Context, df *decov1.Decofile, next *decov1.DecofileStatus) outcome {
	store := r.opts.S3
	url := store.URL(df)
	// The status describes an upload of this content to this URL, and it succeeded (Ready with
	// reason S3Uploaded, or stored with no ConfigMap while the pods confirm it): a flip from
	// configmap, or a new deploymentId, uploads again.
	intact := df.Status.ContentHash != "" && df.Status.S3URL == url &&
		(readyReason(df) == decov1.ReasonS3Uploaded || (df.Status.ContentStored() && df.Status.ConfigMapName == ""))

	got, failed := r.retrieve(ctx, df, intact)
	if failed != nil {
		return *failed
	}
	defer got.release()
	blocks, commit, cached := got.blocks, got.commit, got.cached
	succeeded := func(changed bool) outcome {
		recordRevision(next, df.Spec.Source, commit)
		msg := fmt.Sprintf("uploaded %d bytes of JSON to %s (%s), timestamp %d", next.RawBytes, store.Describe(df), next.S3URL, next.Timestamp)
		if next.GitHubCommit != "" {
			msg += ", commit " + next.GitHubCommit
		}
		return outcome{reason: decov1.ReasonS3Uploaded, message: msg, changed: changed, commit: commit}
	}
	if cached {
		return succeeded(false)
	}
	merged, err := encode.MergeWithin(blocks, r.bounds())
	if err != nil {
		out := fail(tooLarge(err))
		out.commit = commit
		return out
	}
	hash := encode.Hash(merged)
	if rolledBack(df, hash, "") {
		return outcome{known: true} // rolled back by a progressive rollout; kept until the source changes
	}
	if hash == df.Status.ContentHash && intact {
		return succeeded(false)
	}
	ts := df.Status.Timestamp
	if hash != df.Status.ContentHash || ts == 0 {
		// Strictly increasing, as on the ConfigMap path: the push body carries it.
		ts = max(r.now().Unix(), df.Status.Timestamp+1)
	}
	if err := store.Put(ctx, df, merged, hash, ts); err != nil {
		// Status keeps describing the previous object, which stays in place.
		out := fail(err)
		out.commit = commit
		return out
	}
	if hash != df.Status.ContentHash {
		now := metav1.NewTime(r.now())
		next.LastUpdated = &now
	}
	next.ContentHash = hash
	next.Timestamp = ts
	next.Format = decov1.FormatJSON
	next.RawBytes = int64(len(merged))
	next.StoredBytes = int64(len(merged))
	next.S3URL = url
	// The ConfigMap, if any, is no longer updated: status stops naming it, and a flip back
	// rewrites it rather than trusting what it holds by then.
	next.ConfigMapName = ""
	next.StoredHash = ""
	rawBytes.WithLabelValues(df.Namespace, df.Name).Set(float64(len(merged)))
	storedBytes.WithLabelValues(df.Namespace, df.Name).Set(float64(len(merged)))
	return succeeded(true)
}

func readyReason(df *decov1.Decofile) string {
	if c := meta.FindStatusCondition(df.Status.Conditions, decov1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
		return c.Reason
	}
	return ""
}
