package v1alpha1

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// SourceType says where a Decofile's content comes from.
// +kubebuilder:validation:Enum=inline;github;git;oci;sourceRef
type SourceType string

// Source types.
const (
	SourceInline SourceType = "inline"
	SourceGitHub SourceType = "github"
	SourceGit    SourceType = "git"
	SourceOCI    SourceType = "oci"
	// SourceFlux delivers the artifact of a Flux source object (spec.sourceRef).
	SourceFlux SourceType = "sourceRef"
)

// TargetType says where the merged content is stored for pods to load.
// tanstack-kv is accepted so that Decofiles written for the published Decofile operator (v0.11)
// are stored and kept as they are; siteops does not deliver it (Ready=False, TargetNotSupported).
// +kubebuilder:validation:Enum=configmap;s3;tanstack-kv
type TargetType string

// Targets.
const (
	TargetConfigMap TargetType = "configmap"
	TargetS3        TargetType = "s3"
	// TargetTanStackKV syncs the content to a Cloudflare KV namespace with a Job; it is served
	// by the published Decofile operator (v0.11), not by siteops.
	TargetTanStackKV TargetType = "tanstack-kv"
)

// Supported reports whether siteops delivers this target.
func (t TargetType) Supported() bool {
	return t == "" || t == TargetConfigMap || t == TargetS3
}

// Format is how the content is stored in the ConfigMap.
type Format string

// Formats.
const (
	FormatJSON Format = "json"
	FormatBin  Format = "bin"
)

// InlineSource holds the blocks in the Decofile itself.
type InlineSource struct {
	// Value maps a block name to its JSON value.
	// +kubebuilder:validation:Required
	Value map[string]apiextensionsv1.JSON `json:"value"`
}

// GitHubSource reads the blocks from the JSON files of a folder in a GitHub repository.
type GitHubSource struct {
	// Org is the owner of the repository.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9](?:[A-Za-z0-9]|-[A-Za-z0-9]){0,38}$`
	Org string `json:"org"`
	// Repo is the repository name.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]{1,100}$`
	// +kubebuilder:validation:XValidation:rule="self != '.' && self != '..'",message="repo must not be . or .."
	Repo string `json:"repo"`
	// Commit is a commit SHA, a branch or a tag. Branches and tags are re-resolved every spec.interval.
	// It becomes part of GitHub API URLs, so it must be a well-formed git ref name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._/+@-]*$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..') && !self.contains('//') && !self.endsWith('/') && !self.endsWith('.') && !self.endsWith('.lock') && !self.contains('/.')",message="commit must be a commit SHA or a git branch or tag name"
	Commit string `json:"commit"`
	// Path is the folder of the repository holding the block files, e.g. .deco/blocks.
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)\\\\.\\\\.(/|$)')",message="path must not contain '..'"
	// +optional
	Path string `json:"path,omitempty"`
	// Secret names a Secret in the Decofile's namespace whose key "token" authenticates to GitHub.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	Secret string `json:"secret,omitempty"`
}

// GitSource reads the blocks from any git remote (GitLab, Gitea, self-hosted) over HTTPS or SSH.
type GitSource struct {
	// URL of the remote: https://…, ssh://… or user@host:path.
	// +kubebuilder:validation:MinLength=1
	URL string `json:"url"`
	// Ref is a branch, a tag or a commit SHA. Branches and tags are re-resolved every spec.interval.
	// +kubebuilder:default=main
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._/+@-]*$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..') && !self.contains('//') && !self.endsWith('/') && !self.endsWith('.') && !self.endsWith('.lock') && !self.contains('/.')",message="ref must be a commit SHA or a git branch or tag name"
	// +optional
	Ref string `json:"ref,omitempty"`
	// Path is the folder of the repository holding the block files.
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)\\\\.\\\\.(/|$)')",message="path must not contain '..'"
	// +optional
	Path string `json:"path,omitempty"`
	// SecretRef names a Secret with username/password, bearerToken, or identity (SSH key) and known_hosts.
	// +kubebuilder:validation:XValidation:rule="size(self.name) <= 253 && self.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="secretRef.name must be a Secret name (DNS-1123 subdomain)"
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
}

// OCISource reads the blocks from an OCI artifact in a container registry: the layer holding a
// tar+gzip of the block files, as `flux push artifact` and ORAS write it.
type OCISource struct {
	// URL names the artifact: oci://host[:port]/repository followed by :tag or @sha256:digest
	// (without either, :latest). A tag is re-resolved to its digest every spec.interval.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('oci://') && !self.contains(' ')",message="url must be oci://host/repository[:tag|@sha256:digest]"
	URL string `json:"url"`
	// Path is the folder of the artifact holding the block files.
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)\\\\.\\\\.(/|$)')",message="path must not contain '..'"
	// +optional
	Path string `json:"path,omitempty"`
	// SecretRef names a Secret of type kubernetes.io/dockerconfigjson with the registry's
	// credentials.
	// +kubebuilder:validation:XValidation:rule="size(self.name) <= 253 && self.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="secretRef.name must be a Secret name (DNS-1123 subdomain)"
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
}

// FluxSourceRef names a Flux source object in the Decofile's namespace whose artifact holds the
// block files.
type FluxSourceRef struct {
	// Kind of the Flux source.
	// +kubebuilder:validation:Enum=GitRepository;OCIRepository;Bucket
	Kind string `json:"kind"`
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace, when set, must be the Decofile's own: a Decofile never reads another
	// namespace's source.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Path is the folder of the artifact holding the block files.
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)\\\\.\\\\.(/|$)')",message="path must not contain '..'"
	// +optional
	Path string `json:"path,omitempty"`
}

// TanStackKVTarget is the Cloudflare KV destination of the tanstack-kv target, kept so that
// Decofiles written for the published Decofile operator (v0.11) round-trip unchanged.
type TanStackKVTarget struct {
	// KVNamespaceID is the Cloudflare KV namespace the content is synced to.
	// +kubebuilder:validation:MinLength=1
	KVNamespaceID string `json:"kvNamespaceId"`
	// SiteOrigin is the site's public origin, used by the sync job.
	// +optional
	SiteOrigin string `json:"siteOrigin,omitempty"`
}

// RolloutSpec makes the notification of running pods progressive: a few pods first, a health
// check, then more, and an automatic rollback when a step fails. Without it every pod is
// notified at once and a failed rollout is retried until it succeeds.
type RolloutSpec struct {
	// Steps are how many pods have the new content after each step: a count of pods (1) or a
	// percentage of the Decofile's running pods ("10%", rounded up, at least one pod). Counts come
	// first, then percentages, each strictly increasing; a last step below "100%" is followed by
	// one for every pod.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:XValidation:rule="self.all(s, type(s) == int ? (int(s) >= 1 && int(s) <= 100000) : string(s).endsWith('%'))",message="each step is a pod count of at least 1 or a percentage from 1% to 100%"
	// +kubebuilder:validation:XValidation:rule="self.filter(s, type(s) != int).map(s, int(string(s).replace('%', ''))).all(p, p >= 1 && p <= 100)",message="each step is a pod count of at least 1 or a percentage from 1% to 100%"
	// +kubebuilder:validation:XValidation:rule="self.all(s, self.indexOf(s) == self.lastIndexOf(s)) && self.filter(s, type(s) == int).map(s, int(s)).isSorted()",message="steps must be strictly increasing"
	// +kubebuilder:validation:XValidation:rule="!self.exists(s, type(s) != int) || self.filter(s, type(s) == int).all(c, self.indexOf(c) < self.indexOf(self.filter(s, type(s) != int)[0]))",message="pod counts must come before percentages"
	// +kubebuilder:validation:XValidation:rule="self.filter(s, type(s) != int).map(s, int(string(s).replace('%', ''))).isSorted()",message="steps must be strictly increasing"
	Steps []intstr.IntOrString `json:"steps"`
	// Pause is how long the pods of a step run the new content before the health check and the
	// next step. At most 10m.
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('10m')",message="spec.rollout.pause must be between 0s and 10m"
	// +optional
	Pause *metav1.Duration `json:"pause,omitempty"`
	// Check, when set, is also asked of every updated pod after each step.
	// +optional
	Check *RolloutCheck `json:"check,omitempty"`
}

// RolloutCheck is an HTTP GET the operator sends to each updated pod, on the pod's IP and reload
// port: only the path is configurable, so it can never point the operator elsewhere.
type RolloutCheck struct {
	// Path on the pod, e.g. /_healthz: a path only (no scheme, host, port or query), asked on
	// the pod's own IP and reload port.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^/[A-Za-z0-9._~!$&'()*+,;=:%/-]*$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('//') && !self.matches('(^|/)[.][.]?(/|$)')",message="spec.rollout.check.path must be an absolute path on the pod without '.' or '..' segments and not start with //"
	Path string `json:"path"`
	// ExpectedStatus is the HTTP status a healthy pod answers (default 200).
	// +kubebuilder:default=200
	// +kubebuilder:validation:Minimum=200
	// +kubebuilder:validation:Maximum=599
	// +optional
	ExpectedStatus int32 `json:"expectedStatus,omitempty"`
}

// DecofileSpec is the desired content of a site's Decofile and how it is delivered.
// Exactly the block named by spec.source is set: one rule per source kind.
// +kubebuilder:validation:XValidation:rule="(self.source == 'inline') == has(self.inline)",message="exactly the block named by spec.source must be set: spec.inline goes with source inline"
// +kubebuilder:validation:XValidation:rule="(self.source == 'github') == has(self.github)",message="exactly the block named by spec.source must be set: spec.github goes with source github"
// +kubebuilder:validation:XValidation:rule="(self.source == 'git') == has(self.git)",message="exactly the block named by spec.source must be set: spec.git goes with source git"
// +kubebuilder:validation:XValidation:rule="(self.source == 'oci') == has(self.oci)",message="exactly the block named by spec.source must be set: spec.oci goes with source oci"
// +kubebuilder:validation:XValidation:rule="(self.source == 'sourceRef') == has(self.sourceRef)",message="exactly the block named by spec.source must be set: spec.sourceRef goes with source sourceRef"
// +kubebuilder:validation:XValidation:rule="!has(self.target) || self.target != 'tanstack-kv' || (has(self.tanstackKV) && self.source == 'github')",message="spec.target tanstack-kv needs spec.tanstackKV and spec.source github"
type DecofileSpec struct {
	// Source selects which of inline, github, git, oci or sourceRef provides the content.
	// +kubebuilder:validation:Required
	Source SourceType `json:"source"`
	// Inline content.
	// +optional
	Inline *InlineSource `json:"inline,omitempty"`
	// GitHub content.
	// +optional
	GitHub *GitHubSource `json:"github,omitempty"`
	// Git content.
	// +optional
	Git *GitSource `json:"git,omitempty"`
	// OCI content.
	// +optional
	OCI *OCISource `json:"oci,omitempty"`
	// SourceRef content: a Flux source object's artifact.
	// +optional
	SourceRef *FluxSourceRef `json:"sourceRef,omitempty"`
	// DeploymentID identifies the site's workloads (label app.deco/deploymentId) and names its
	// S3 object; defaults to the Decofile's name. A DNS-1123 label: it becomes part of object
	// keys, URLs and label values. Two Decofiles of a namespace must not share one: the newer
	// one is reported with Ready=False reason DeploymentIDConflict and not delivered.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	DeploymentID string `json:"deploymentId,omitempty"`
	// Target is where the content is stored: a ConfigMap (default) or an S3 object.
	// +kubebuilder:default=configmap
	// +optional
	Target TargetType `json:"target,omitempty"`
	// TanStackKV configures the tanstack-kv target (served by the published Decofile operator
	// v0.11; siteops keeps it as written).
	// +optional
	TanStackKV *TanStackKVTarget `json:"tanstackKV,omitempty"`
	// Silent stores new content without notifying running pods.
	// +optional
	Silent bool `json:"silent,omitempty"`
	// Suspend stops delivery until it is unset: the source is not read, nothing is stored and no
	// pod is notified; what is stored stays and injection goes on (siteops suspend / resume).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
	// Interval is how often a branch or tag is re-resolved. A commit SHA is never polled.
	// At least 10s: every poll asks the remote, so a tiny interval would hammer it.
	// +kubebuilder:default="1m0s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="spec.interval must be at least 10s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Rollout makes the notification of running pods progressive, with health checks and an
	// automatic rollback. Unset: every pod is notified at once.
	// +optional
	Rollout *RolloutSpec `json:"rollout,omitempty"`
}

// Decofile is the configuration of one Deco site, delivered to its pods.
//
// Its name becomes part of ConfigMap and Secret names, label values and (as the default
// deploymentId) S3 object keys, so it must be a DNS-1123 label.
//
// +kubebuilder:object:root=true
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1123 label (at most 63 lower-case letters, digits and '-')"
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=df,categories=siteops
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.target`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.shortCommit`
// +kubebuilder:printcolumn:name="Revision",type=string,priority=1,JSONPath=`.status.artifact.revision`
// +kubebuilder:printcolumn:name="Format",type=string,JSONPath=`.status.format`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.storedBytes`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Notified",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="PodsNotified")].status`
// +kubebuilder:printcolumn:name="Step",type=integer,priority=1,JSONPath=`.status.rollout.step`
// +kubebuilder:printcolumn:name="Rollout",type=string,priority=1,JSONPath=`.status.rollout.phase`
// +kubebuilder:printcolumn:name="Shard",type=string,priority=1,JSONPath=`.metadata.labels.sharding\.siteops\.dev/key`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Decofile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec DecofileSpec `json:"spec,omitempty"`
	// Status is the observed state. It defaults to observedGeneration 0 so that, before the first
	// reconcile, kstatus reads a new Decofile as InProgress rather than Current (it treats a
	// missing observedGeneration as nothing to wait for).
	// +kubebuilder:default={observedGeneration: 0}
	Status DecofileStatus `json:"status,omitempty"`
}

// DecofileList is a list of Decofiles.
//
// +kubebuilder:object:root=true
type DecofileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Decofile `json:"items"`
}

// DeploymentIDOrName is spec.deploymentId, or the Decofile's name when that is empty.
func (d *Decofile) DeploymentIDOrName() string {
	if d.Spec.DeploymentID != "" {
		return d.Spec.DeploymentID
	}
	return d.Name
}

// ClaimsBefore reports whether d's claim on its deploymentId precedes other's: the older
// Decofile (by creationTimestamp, then name) keeps the deploymentId when two share it.
func (d *Decofile) ClaimsBefore(other *Decofile) bool {
	if !d.CreationTimestamp.Equal(&other.CreationTimestamp) {
		return d.CreationTimestamp.Before(&other.CreationTimestamp)
	}
	return d.Name < other.Name
}

// TargetOrDefault is spec.target, or configmap when unset.
func (d *Decofile) TargetOrDefault() TargetType {
	if d.Spec.Target == "" {
		return TargetConfigMap
	}
	return d.Spec.Target
}

// ConfigMapName is the ConfigMap the controller writes and the webhook mounts.
func (d *Decofile) ConfigMapName() string { return "decofile-" + d.Name }

// LastGoodConfigMapName is the ConfigMap keeping the last content every pod confirmed under
// spec.rollout. The dot keeps it apart from every Decofile's own ConfigMap: Decofile names are
// DNS labels, so "decofile-<name>" never contains one.
func (d *Decofile) LastGoodConfigMapName() string { return d.ConfigMapName() + ".last-good" }

// RollingBack reports whether a progressive rollout asked for the last good content to be
// stored again in place of the current one, and the delivery controller has not done so yet.
func (d *Decofile) RollingBack() bool {
	ro, lg := d.Status.Rollout, d.Status.LastGood
	return ro != nil && ro.Phase == PhaseRollingBack && ro.FailedHash != "" && ro.FailedHash == d.Status.ContentHash &&
		lg != nil && lg.ContentHash != "" && lg.ContentHash != ro.FailedHash
}

// ReloadSecretName is the Secret holding the workload's stable reload token.
func (d *Decofile) ReloadSecretName() string { return "decofile-" + d.Name + "-reload" }

// S3ObjectKey is the object key for the s3 target, shared by the controller (upload) and the
// webhook (DECO_RELEASE URL) so neither depends on the other's timing.
func (d *Decofile) S3ObjectKey(prefix string) string {
	key := d.Namespace + "/" + d.DeploymentIDOrName() + "/decofile.json"
	if p := strings.Trim(prefix, "/"); p != "" {
		return p + "/" + key
	}
	return key
}
