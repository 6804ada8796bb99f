package v1alpha1

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RolloutStatus summarises the notification of running pods for one content version.
type RolloutStatus struct {
	// ID is the version being rolled out: commit:<sha> or timestamp:<ts>.
	ID string `json:"id,omitempty"`
	// Total pods selected.
	Total int32 `json:"total"`
	// Notified pods that confirmed the content.
	Notified int32 `json:"notified"`
	// Failed pods that did not confirm the content.
	Failed int32 `json:"failed"`
	// Skipped pods that were not running, had no IP, or went away.
	Skipped int32 `json:"skipped"`
	// StartedAt is when the rollout began.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the rollout ended, successfully or not.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Step is the step of a progressive rollout (spec.rollout) being notified or checked, from 1.
	// +optional
	Step int32 `json:"step,omitempty"`
	// Steps is the number of steps of this rollout.
	// +optional
	Steps int32 `json:"steps,omitempty"`
	// Updated pods were sent this version by the steps so far.
	// +optional
	Updated int32 `json:"updated,omitempty"`
	// Phase of a progressive rollout: Notifying, Pausing, Checking, RollingBack, RolledBack,
	// Succeeded or Failed.
	// +optional
	Phase string `json:"phase,omitempty"`
	// FailedHash is the contentHash a failed step rolled back. That content is not stored or
	// rolled out again until the source changes.
	// +optional
	FailedHash string `json:"failedHash,omitempty"`
	// FailedID names the rolled-back version (commit:<sha> or timestamp:<ts>).
	// +optional
	FailedID string `json:"failedID,omitempty"`
	// FailedCommit is the commit of the rolled-back version (git and github sources): resolving
	// to it again does not even download it.
	// +optional
	FailedCommit string `json:"failedCommit,omitempty"`
	// Behind lists pods that did not confirm this rollout's content, with why: the first
	// MaxPodsBehind of them (Failed counts them all).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Behind []PodBehind `json:"behind,omitempty"`
	// Confirmed counts the pods this rollout addresses by the content each last confirmed: this
	// rollout's for the pods that confirmed it, an earlier one for pods behind or not reached yet,
	// "" for pods whose last confirmation is not known (started since the last rollout every pod
	// confirmed, or behind since before the manager restarted). Most pods first; skipped pods are
	// not counted.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Confirmed []ConfirmedContent `json:"confirmed,omitempty"`
}

// MaxConfirmedContents bounds status.rollout.confirmed.
const MaxConfirmedContents = 10

// ConfirmedContent is how many pods last confirmed one content.
type ConfirmedContent struct {
	// ContentHash is the content's SHA-256 (hex); empty for pods whose last confirmation is not
	// known.
	ContentHash string `json:"contentHash"`
	// Pods that last confirmed it.
	Pods int32 `json:"pods"`
}

// MaxPodsBehind bounds status.rollout.behind, so a rollout to thousands of pods keeps a small status.
const MaxPodsBehind = 20

// PodBehind is a pod that did not confirm a rollout's content.
type PodBehind struct {
	// Name of the pod.
	Name string `json:"name"`
	// Reason the pod did not confirm it: refused, timed out, answered an error.
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason"`
	// HTTPStatus is the last status the pod answered; 0 when it never answered.
	// +optional
	HTTPStatus int32 `json:"httpStatus,omitempty"`
	// Attempts is how many times the pod was sent the content.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// ConfirmedHash is the content the pod last confirmed; empty when not known.
	// +optional
	ConfirmedHash string `json:"confirmedHash,omitempty"`
}

// StoredContent describes a content version as it was stored: the last one every pod confirmed
// under a progressive rollout, kept (in the ConfigMap decofile-<name>-last-good) for a rollback.
type StoredContent struct {
	// ContentHash is the SHA-256 (hex) of the merged JSON.
	ContentHash string `json:"contentHash"`
	// StoredHash is the SHA-256 (hex) of the stored value kept.
	StoredHash string `json:"storedHash"`
	// Format of the stored value: json or bin.
	Format Format `json:"format"`
	// Timestamp the content was stored with.
	Timestamp int64 `json:"timestamp"`
	// RawBytes is the size of the merged JSON.
	RawBytes int64 `json:"rawBytes"`
	// StoredBytes is the size of the stored value.
	StoredBytes int64 `json:"storedBytes"`
	// SourceType the content came from.
	// +optional
	SourceType SourceType `json:"sourceType,omitempty"`
	// GitHubCommit the content was read from (git and github sources).
	// +optional
	GitHubCommit string `json:"githubCommit,omitempty"`
	// Revision of the source the content was read from (see Artifact.Revision).
	// +optional
	Revision string `json:"revision,omitempty"`
}

// Artifact describes the stored content the same way for every source kind.
type Artifact struct {
	// Revision is the source's name for the version: a commit SHA (github, git),
	// tag@sha256:digest (oci), the Flux artifact's revision (sourceRef); empty for inline content, which has no revision but its digest.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Digest is sha256:<hex> of the merged JSON.
	Digest string `json:"digest"`
	// Size is the size of the merged JSON in bytes.
	Size int64 `json:"size"`
	// LastUpdateTime is when the stored content last changed.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
}

// DecofileStatus is the observed state of a Decofile.
type DecofileStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (content stored and, unless silent, confirmed by every pod),
	// PodsNotified (rollout of that content), and the kstatus conditions Reconciling (True while
	// a transient failure is being retried or the content is being rolled out) and Stalled (True
	// when delivery failed in a way only a change can fix); both are removed once the content is
	// delivered.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// SourceType is the source the stored content came from.
	// +optional
	SourceType SourceType `json:"sourceType,omitempty"`
	// GitHubCommit is the commit SHA the stored content was read from (github and git sources),
	// kept for clients of v0.11; Artifact.Revision names it for every kind.
	// +optional
	GitHubCommit string `json:"githubCommit,omitempty"`
	// Artifact describes the stored content for every source kind.
	// +optional
	Artifact *Artifact `json:"artifact,omitempty"`
	// ShortCommit is the first 7 characters of GitHubCommit, for display.
	// +optional
	ShortCommit string `json:"shortCommit,omitempty"`
	// ContentHash is the SHA-256 (hex) of the stored merged JSON.
	// +optional
	ContentHash string `json:"contentHash,omitempty"`
	// StoredHash is the SHA-256 (hex) of the exact value the operator wrote to the ConfigMap
	// (decofile.json or decofile.bin; configmap target only). It is what decides whether the
	// ConfigMap is intact: the ConfigMap is writable by the namespace's users, the status is not.
	// +optional
	StoredHash string `json:"storedHash,omitempty"`
	// NotifiedHash is the ContentHash whose rollout every pod confirmed.
	// +optional
	NotifiedHash string `json:"notifiedHash,omitempty"`
	// ConfigMapName is the ConfigMap holding the content (configmap target).
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`
	// S3URL is the public URL of the object holding the content (s3 target).
	// +optional
	S3URL string `json:"s3URL,omitempty"`
	// Format is json or bin (brotli+base64).
	// +optional
	Format Format `json:"format,omitempty"`
	// RawBytes is the size of the merged JSON.
	// +optional
	RawBytes int64 `json:"rawBytes,omitempty"`
	// StoredBytes is the size of the stored form.
	// +optional
	StoredBytes int64 `json:"storedBytes,omitempty"`
	// Timestamp is the value written to timestamp.txt (Unix seconds, strictly increasing).
	// +optional
	Timestamp int64 `json:"timestamp,omitempty"`
	// LastUpdated is when the stored content last changed.
	// +optional
	LastUpdated *metav1.Time `json:"lastUpdated,omitempty"`
	// JobName is the KV sync Job of the tanstack-kv target, written by the published Decofile
	// operator (v0.11); siteops keeps it and never writes it.
	// +optional
	JobName string `json:"jobName,omitempty"`
	// Rollout summarises the latest notification of running pods.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`
	// LastHandledReconcileAt is the value of the deco.sites/reconcile-requested-at annotation
	// the delivery controller handled last: once it equals the annotation, the source was
	// re-resolved and this status describes the result.
	// +optional
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`
	// LastGood is the last content every pod confirmed under spec.rollout, kept for a rollback.
	// +optional
	LastGood *StoredContent `json:"lastGood,omitempty"`
	// History lists how the last rollouts to the pods ended, newest first (at most MaxHistory).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	History []RolloutRecord `json:"history,omitempty"`
}

// MaxHistory bounds status.history.
const MaxHistory = 5

// Results of a rollout in status.history.
const (
	RolloutSucceeded  = "Succeeded"
	RolloutFailed     = "Failed"
	RolloutRolledBack = "RolledBack"
)

// RolloutRecord is how one rollout of a Decofile's content to its pods ended.
type RolloutRecord struct {
	// ID names the version: commit:<sha> or timestamp:<ts>.
	ID string `json:"id"`
	// ContentHash is the SHA-256 (hex) of the content rolled out.
	ContentHash string `json:"contentHash"`
	// Result is Succeeded, Failed or RolledBack.
	Result string `json:"result"`
	// FinishedAt is when the rollout ended.
	FinishedAt metav1.Time `json:"finishedAt"`
	// Duration of the rollout.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// Pods the rollout addressed.
	Pods int32 `json:"pods"`
	// PodsConfirmed loaded the content.
	PodsConfirmed int32 `json:"podsConfirmed"`
	// Count is how many rollouts in a row ended this way for this version (retries of a failed
	// one count here rather than pushing older entries out).
	Count int32 `json:"count"`
}

// RolloutID names a content version the way PodsNotified messages and `decofile wait` do:
// commit:<sha> for git and github sources, revision:<revision> for other kinds with revisions
// (oci), timestamp:<ts> for inline content.
func RolloutID(status *DecofileStatus) string {
	if status.GitHubCommit != "" && status.SourceType != SourceInline {
		return "commit:" + status.GitHubCommit
	}
	if rev := status.Revision(); rev != "" {
		return "revision:" + rev
	}
	return "timestamp:" + strconv.FormatInt(status.Timestamp, 10)
}

// Revision is the source revision of the stored content: status.artifact.revision, or for a
// status written before artifacts (v0.11) its githubCommit.
func (s *DecofileStatus) Revision() string {
	if s.Artifact != nil {
		return s.Artifact.Revision
	}
	if s.SourceType != SourceInline {
		return s.GitHubCommit
	}
	return ""
}

// ContentStored reports whether the content s names is stored as recorded: Ready is True, or
// says only that the pods have yet to confirm it (RollingOut, PodsBehind).
func (s *DecofileStatus) ContentStored() bool {
	for _, c := range s.Conditions {
		if c.Type == ConditionReady {
			return c.Status == metav1.ConditionTrue || c.Reason == ReasonRollingOut || c.Reason == ReasonPodsBehind
		}
	}
	return false
}

// StoredArtifact describes the content s says is stored, read from revision; nil when nothing
// is stored.
func StoredArtifact(s *DecofileStatus, revision string) *Artifact {
	if s.ContentHash == "" {
		return nil
	}
	return &Artifact{Revision: revision, Digest: "sha256:" + s.ContentHash, Size: s.RawBytes, LastUpdateTime: s.LastUpdated}
}

// SourceRevision is the source revision the kept content was read from; for a record written
// before revisions, its githubCommit.
func (c *StoredContent) SourceRevision() string {
	if c.Revision != "" || c.SourceType == SourceInline {
		return c.Revision
	}
	return c.GitHubCommit
}
