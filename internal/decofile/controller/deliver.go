package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/source"
)

// deliver retrieves, encodes and stores the content, updating next (the status to record).
func (r *Reconciler) deliver(ctx context.Context, df *decov1.Decofile, next *decov1.DecofileStatus) outcome {
	s3 := df.TargetOrDefault() == decov1.TargetS3
	if s3 && r.opts.S3 == nil {
		return outcome{reason: ReasonS3NotConfigured, err: errors.New("spec.target is s3 but this operator has no S3 target configured (--s3-bucket is not set); use target: configmap, or configure the operator's --s3-* flags")}
	}
	// The slot comes before any read, so a Decofile waiting for one costs the API server nothing
	// while it waits.
	retrieved, ok := r.takeRetrieval(df)
	if !ok {
		return outcome{busy: true}
	}
	defer retrieved()
	if s3 {
		return r.deliverS3(ctx, df, next)
	}
	try := next.DeepCopy()
	out := r.deliverConfigMap(ctx, df, try, false)
	if apierrors.IsAlreadyExists(out.err) {
		// Created since the cache was filled or by someone else: read it and decide again.
		try = next.DeepCopy()
		out = r.deliverConfigMap(ctx, df, try, true)
	}
	*next = *try
	return out
}

// deliverConfigMap is deliver to the ConfigMap target; fresh reads the ConfigMap from the API
// server even when the cache has none.
func (r *Reconciler) deliverConfigMap(ctx context.Context, df *decov1.Decofile, next *decov1.DecofileStatus, fresh bool) outcome {
	cm, conflict := r.configMap(ctx, df, fresh)
	if conflict != nil && cm == nil {
		return fail(conflict)
	}
	intact := isIntact(cm, &df.Status)
	// The status says this ConfigMap holds content the operator stored, and it does not:
	// someone else changed it. It is rewritten from the source like any missing content.
	defaced := cm != nil && !intact && df.Status.StoredHash != "" && df.Status.ConfigMapName == cm.Name

	got, failed := r.retrieve(ctx, df, intact)
	if failed != nil {
		return *failed
	}
	defer got.release()
	blocks, commit, cached := got.blocks, got.commit, got.cached
	out := r.store(ctx, df, next, cm, conflict, intact, blocks, commit, cached)
	out.commit = commit
	if out.err == nil {
		next.S3URL = "" // back on the configmap target: pods no longer load the object
		out.restored = defaced && out.changed
	}
	return out
}

// retrieved is the content a reconcile read from its source.
type retrieved struct {
	blocks source.Blocks
	commit string
	// cached: the revision is the one stored and intact; nothing was downloaded.
	cached bool
	// release gives back the memory the content holds until it is stored.
	release func()
}

// retrieve reads df's content from its source (nothing when intact says the stored revision
// needs no download) and admits it into the memory budget, where it stays until release. The
// outcome, when not nil, is why nothing was retrieved.
func (r *Reconciler) retrieve(ctx context.Context, df *decov1.Decofile, intact bool) (retrieved, *outcome) {
	start := r.now()
	blocks, commit, cached, err := r.fetch(ctx, df, intact)
	fetchDuration.WithLabelValues(string(df.Spec.Source)).Observe(r.now().Sub(start).Seconds())
	if errors.Is(err, errRejected) {
		return retrieved{}, &outcome{known: true}
	}
	got := retrieved{blocks: blocks, commit: commit, cached: cached, release: func() {}}
	if err == nil && !cached {
		got.release, err = r.admit(ctx, df.Namespace, blocks)
	}
	if err != nil {
		out := fail(err)
		out.commit = commit
		return retrieved{}, &out
	}
	return got, nil
}

// errRejected says the resolved commit is the one that already failed for good.
var errRejected = errors.New("commit already rejected")

// store records the fetched commit and, when the content changed, encodes and writes it. A
// ConfigMap the operator never stored to (no status.storedHash) that already holds this content
// is adopted instead of rewritten; conflict, when set, is why cm may be written only that way.
func (r *Reconciler) store(ctx context.Context, df *decov1.Decofile, next *decov1.DecofileStatus, cm *corev1.ConfigMap, conflict error, intact bool, blocks source.Blocks, commit string, cached bool) outcome {
	// Source and commit are recorded only with content stored from them: after a failure,
	// sourceType and githubCommit still describe the content pods have.
	succeeded := func(changed bool) outcome {
		recordRevision(next, df.Spec.Source, commit)
		// Also when nothing was written: after a flip back from s3 the status names the
		// ConfigMap again.
		next.ConfigMapName = df.ConfigMapName()
		return outcome{reason: decov1.ReasonSucceeded, message: successMessage(next), changed: changed}
	}
	if cached {
		return succeeded(false)
	}

	merged, err := encode.MergeWithin(blocks, r.bounds())
	if err != nil {
		return fail(tooLarge(err))
	}
	hash := encode.Hash(merged)
	if rolledBack(df, hash, "") {
		// A progressive rollout rolled this content back: the restored content stays until the
		// source changes. Also while the status still names it (the rollback is writing the
		// ConfigMap and then the status): nothing is written meanwhile.
		return outcome{known: true}
	}
	if !intact && df.Status.StoredHash == "" && cm != nil {
		// What an adoptable value decodes to is the merged JSON, give or take whitespace.
		if a, ok := adoptable(cm, hash, min(r.contentLimit(), 2*int64(len(merged))+4096), r.bounds()); ok {
			if err := r.adoptConfigMap(ctx, df, cm, hash, a); err != nil {
				return fail(err)
			}
			next.ContentHash, next.StoredHash = hash, encode.Hash([]byte(a.data))
			next.Timestamp, next.Format = a.ts, a.format
			next.RawBytes, next.StoredBytes = int64(len(merged)), int64(len(a.data))
			next.ConfigMapName = df.ConfigMapName()
			if next.LastUpdated == nil {
				now := metav1.NewTime(r.now())
				next.LastUpdated = &now
			}
			out := succeeded(false)
			out.adopted = true
			return out
		}
		if conflict != nil {
			return fail(conflict)
		}
	}
	if hash == df.Status.ContentHash && intact {
		// Same content (perhaps a new commit that changed nothing in the folder): nothing to
		// compress or write.
		return succeeded(false)
	}

	encStart := r.now()
	res, err := encode.Encode(merged, r.encodeOptions(ctx, df.Namespace))
	compressionDuration.Observe(r.now().Sub(encStart).Seconds())
	var tooLarge *encode.TooLargeError
	if errors.As(err, &tooLarge) {
		return outcome{reason: decov1.ReasonTooLarge, err: err}
	}
	var waited *source.Error // the compression budget's wait ended (context)
	if errors.As(err, &waited) {
		return fail(err)
	}
	if err != nil {
		return outcome{reason: ReasonStoreFailed, err: fmt.Errorf("encode: %w", err), transient: true}
	}
	// A format switch must not take away the file running pods load when they start again. The
	// workloads are looked up only for a switch: content staying under the key it is stored
	// under now takes nothing away, and the lookup is several requests per delivery.
	var stranded []string
	if res.Key != storedKey(cm, df) {
		readers, err := r.readers(ctx, df)
		if err != nil {
			return outcome{reason: ReasonStoreFailed, err: fmt.Errorf("find the workloads reading ConfigMap %s: %w", df.ConfigMapName(), err), transient: true}
		}
		if res, stranded, err = keepReadKey(res, merged, readers, r.opts.Encode); err != nil {
			return outcome{reason: ReasonStoreFailed, err: fmt.Errorf("encode: %w", err), transient: true}
		}
	}

	ts := df.Status.Timestamp
	if hash != df.Status.ContentHash || ts == 0 {
		// Strictly increasing even for two changes within one second: pods wait for a
		// timestamp.txt at least as new as the one they were told about. The ConfigMap's own
		// timestamp counts only when it is the operator's.
		var stored int64
		if intact {
			stored = timestampOf(cm)
		}
		ts = max(r.now().Unix(), df.Status.Timestamp+1, stored+1)
	}
	if err := r.writeConfigMap(ctx, df, cm, res, hash, ts); err != nil {
		return fail(err)
	}
	if len(stranded) > 0 {
		r.recorder.Eventf(df, nil, corev1.EventTypeWarning, ReasonFormatSwitched, "Deliver",
			"the content no longer fits in %s and is now stored as %s; re-apply %s so the webhook points them at %s before their pods restart",
			decov1.KeyJSON, decov1.KeyBin, strings.Join(stranded, ", "), decov1.KeyBin)
	}
	if hash != df.Status.ContentHash {
		now := metav1.NewTime(r.now())
		next.LastUpdated = &now
	}
	next.ContentHash = hash
	next.StoredHash = encode.Hash([]byte(res.Data))
	next.Timestamp = ts
	next.Format = res.Format
	next.RawBytes = int64(res.RawBytes)
	next.StoredBytes = int64(res.StoredBytes())
	next.ConfigMapName = df.ConfigMapName()
	rawBytes.WithLabelValues(df.Namespace, df.Name).Set(float64(res.RawBytes))
	storedBytes.WithLabelValues(df.Namespace, df.Name).Set(float64(res.StoredBytes()))
	return succeeded(true)
}

// contentLimit is the most JSON an existing ConfigMap value is decoded to when it is checked
// for adoption: the same bound a source may deliver.
func (r *Reconciler) contentLimit() int64 {
	if r.opts.GitHub != nil && r.opts.GitHub.Limits.DecompressedBytes > 0 {
		return r.opts.GitHub.Limits.DecompressedBytes
	}
	return source.DefaultLimits.DecompressedBytes
}

func fail(err error) outcome {
	e := source.AsError(err)
	return outcome{reason: e.Reason, err: e, transient: e.Transient}
}

func successMessage(s *decov1.DecofileStatus) string {
	msg := fmt.Sprintf("stored %d bytes of JSON as %s (%d bytes) in ConfigMap %s, timestamp %d", s.RawBytes, keyOf(s.Format), s.StoredBytes, s.ConfigMapName, s.Timestamp)
	if s.GitHubCommit != "" {
		msg += ", commit " + s.GitHubCommit
	}
	return msg
}

func keyOf(f decov1.Format) string {
	if f == decov1.FormatBin {
		return decov1.KeyBin
	}
	return decov1.KeyJSON
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
