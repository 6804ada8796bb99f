package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types and reasons shared by the mirror resources.
const (
	// ConditionReady is the kstatus readiness condition.
	ConditionReady = "Ready"
	// ConditionCursorsDurable says whether watch resume cursors are being recorded in Redis.
	ConditionCursorsDurable = "CursorsDurable"
)

// Committer is the git identity that makes the commits.
type Committer struct {
	// Name of the committer.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Email of the committer.
	// +kubebuilder:validation:MinLength=1
	Email string `json:"email"`
}

// GitProviderSpec describes a git remote and how to authenticate to it.
type GitProviderSpec struct {
	// URL of the repository: https://…, ssh://… or user@host:path.
	// +kubebuilder:validation:Pattern=`^(https?://|ssh://|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:).+`
	URL string `json:"url"`
	// SecretRef names a Secret in the provider's namespace holding either an SSH key
	// (identity or ssh-privatekey) with known_hosts, username/password, or bearerToken.
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
	// AllowedBranches are globs (path.Match syntax) that GitTargets' branches must match.
	// Empty allows every branch.
	// +optional
	AllowedBranches []string `json:"allowedBranches,omitempty"`
	// Committer names the identity of every commit.
	Committer Committer `json:"committer"`
	// Signing makes the mirror sign every commit it makes, with a key from a Secret in the
	// provider's namespace. Without it commits are unsigned.
	// +optional
	Signing *CommitSigning `json:"signing,omitempty"`
}

// SigningFormat is the format of commit signatures, as git's gpg.format names it.
// +kubebuilder:validation:Enum=SSH;OpenPGP
type SigningFormat string

// Signing formats.
const (
	// SigningSSH signs with an SSH private key (SSHSIG, namespace "git"): verify with
	// gpg.format=ssh and gpg.ssh.allowedSignersFile.
	SigningSSH SigningFormat = "SSH"
	// SigningOpenPGP signs with an OpenPGP secret key: verify with the public key in gpg's keyring.
	SigningOpenPGP SigningFormat = "OpenPGP"
)

// CommitSigning names the key the mirror signs commits with.
type CommitSigning struct {
	// Format is SSH or OpenPGP.
	Format SigningFormat `json:"format"`
	// SecretRef names a Secret in the provider's namespace holding the private key.
	SecretRef corev1.LocalObjectReference `json:"secretRef"`
	// Key is the Secret key holding the private key: an OpenSSH private key (SSH) or an
	// armored OpenPGP secret key (OpenPGP).
	// +kubebuilder:default=signingKey
	// +kubebuilder:validation:MinLength=1
	// +optional
	Key string `json:"key,omitempty"`
	// PassphraseKey, when set, is the Secret key holding the passphrase of an encrypted key.
	// +optional
	PassphraseKey string `json:"passphraseKey,omitempty"`
}

// GitProviderStatus is the observed state of a GitProvider.
type GitProviderStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready says the provider's credentials (and signing key, when set) could be loaded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GitProvider is a git remote the mirror pushes to.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=siteops;mirror
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="Signing",type=string,JSONPath=`.spec.signing.format`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GitProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GitProviderSpec   `json:"spec"`
	Status GitProviderStatus `json:"status,omitempty"`
}

// GitProviderList is a list of GitProviders.
// +kubebuilder:object:root=true
type GitProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitProvider `json:"items"`
}

// DeletePolicy says what a deleted cluster object does to its file in git.
// +kubebuilder:validation:Enum=apply;ignore
type DeletePolicy string

// Delete policies.
const (
	// DeletesApply removes the file of a deleted object.
	DeletesApply DeletePolicy = "apply"
	// DeletesIgnore keeps the file of a deleted object.
	DeletesIgnore DeletePolicy = "ignore"
)

// GitTargetSpec is where in git a set of watched resources is written.
type GitTargetSpec struct {
	// ProviderRef names a GitProvider in the target's namespace.
	ProviderRef corev1.LocalObjectReference `json:"providerRef"`
	// Branch is written to; it must match the provider's allowedBranches.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._/-]+$`
	Branch string `json:"branch"`
	// Path is the folder of the repository the files go under; empty means the root.
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/')",message="path must not start with /"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)\\\\.\\\\.(/|$)')",message="path must not contain '..'"
	// +optional
	Path string `json:"path,omitempty"`
	// CommitWindow batches the changes of this long into one commit; 0s makes one commit per change.
	// +kubebuilder:default="5s"
	// +optional
	CommitWindow *metav1.Duration `json:"commitWindow,omitempty"`
	// Deletes says whether deleting an object removes its file (apply) or keeps it (ignore).
	// +kubebuilder:default=apply
	// +optional
	Deletes DeletePolicy `json:"deletes,omitempty"`
	// Secrets says whether Secrets the rules select are written (SOPS-encrypted) or left out.
	// Without it Secrets are never written.
	// +optional
	Secrets *SecretsPolicy `json:"secrets,omitempty"`
	// Suspend stops mirroring until it is unset: nothing more is committed, and the watch
	// cursors are kept, so the resume commits what changed meanwhile without a replay.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// SecretsMode says whether a GitTarget writes Secrets.
// +kubebuilder:validation:Enum=Never;Encrypt
type SecretsMode string

// Secrets modes.
const (
	// SecretsNever leaves Secrets out of git (the default).
	SecretsNever SecretsMode = "Never"
	// SecretsEncrypt writes Secrets with their data and stringData encrypted by SOPS.
	SecretsEncrypt SecretsMode = "Encrypt"
)

// SecretsPolicy opts a GitTarget in to mirroring Secrets, encrypted.
// +kubebuilder:validation:XValidation:rule="self.mode != 'Encrypt' || (has(self.age) && size(self.age.recipients) > 0)",message="mode Encrypt needs age.recipients"
type SecretsPolicy struct {
	// Mode is Never (Secrets are not written) or Encrypt (written with SOPS, values encrypted).
	// +kubebuilder:default=Never
	// +optional
	Mode SecretsMode `json:"mode,omitempty"`
	// Age lists the age recipients Secrets are encrypted to.
	// +optional
	Age *AgeEncryption `json:"age,omitempty"`
}

// AgeEncryption names the age recipients of SOPS-encrypted files.
type AgeEncryption struct {
	// Recipients are age public keys (age1…); any one matching identity decrypts (`sops -d`).
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Recipients []string `json:"recipients,omitempty"`
}

// ExcludedResource is a resource a rule matched that is not mirrored, and why.
type ExcludedResource struct {
	// Resource is <resource>.<group> (or <resource> for the core group).
	Resource string `json:"resource"`
	// Reason says why it is not mirrored.
	Reason string `json:"reason"`
}

// GitTargetStatus is the observed state of a GitTarget.
type GitTargetStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (watches running and pushes succeeding) and CursorsDurable (Redis reachable).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastPushedCommit is the SHA of the last commit pushed for this target's branch.
	// +optional
	LastPushedCommit string `json:"lastPushedCommit,omitempty"`
	// LastPushTime is when that commit was pushed.
	// +optional
	LastPushTime *metav1.Time `json:"lastPushTime,omitempty"`
	// WatchedStreams counts the running watches (one per resource and namespace scope).
	// +optional
	WatchedStreams int32 `json:"watchedStreams,omitempty"`
	// PendingWrites counts changes waiting to be pushed.
	// +optional
	PendingWrites int32 `json:"pendingWrites,omitempty"`
	// SkippedSecrets counts Secret resources the rules matched that are not written (spec.secrets
	// does not opt in; never in plaintext).
	// +optional
	SkippedSecrets int32 `json:"skippedSecrets,omitempty"`
	// Excluded lists resources the rules matched that are not mirrored.
	// +optional
	Excluded []ExcludedResource `json:"excluded,omitempty"`
	// History lists the last pushes and push failures the status recorded, newest first (at
	// most MaxHistory).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	History []PushRecord `json:"history,omitempty"`
	// LayoutDigest identifies the spec fields that decide which files are written where (all
	// but suspend and commitWindow) as last applied; the watch cursors belong to it, and a
	// change of it makes the next start replay instead of resuming from them.
	// +optional
	LayoutDigest string `json:"layoutDigest,omitempty"`
}

// MaxHistory bounds status.history.
const MaxHistory = 5

// PushRecord is one push of a GitTarget's branch, or a failure to push.
type PushRecord struct {
	// Commit pushed (empty for a failure).
	// +optional
	Commit string `json:"commit,omitempty"`
	// Result is Pushed, or the Ready reason of the failure (PushFailed, RemoteNotAllowed…).
	Result string `json:"result"`
	// Time of the push, or when the failure was first recorded.
	Time metav1.Time `json:"time"`
	// Count is how many times in a row this failure was recorded; 1 for a push.
	Count int32 `json:"count"`
}

// GitTarget is a branch and folder of a GitProvider that watched resources are mirrored into.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=siteops;mirror
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.providerRef.name`
// +kubebuilder:printcolumn:name="Branch",type=string,JSONPath=`.spec.branch`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.spec.path`
// +kubebuilder:printcolumn:name="Streams",type=integer,JSONPath=`.status.watchedStreams`
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Shard",type=string,priority=1,JSONPath=`.metadata.labels.sharding\.siteops\.dev/key`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.lastPushedCommit`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GitTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GitTargetSpec   `json:"spec"`
	Status GitTargetStatus `json:"status,omitempty"`
}

// GitTargetList is a list of GitTargets.
// +kubebuilder:object:root=true
type GitTargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitTarget `json:"items"`
}

// Operation is a kind of change a rule mirrors.
// +kubebuilder:validation:Enum=CREATE;UPDATE;DELETE;"*"
type Operation string

// Operations.
const (
	OperationCreate Operation = "CREATE"
	OperationUpdate Operation = "UPDATE"
	OperationDelete Operation = "DELETE"
	OperationAll    Operation = "*"
)

// ResourceRule selects resources by API group, version and plural name.
type ResourceRule struct {
	// APIGroups are the groups; "" is the core group, "*" every group.
	// +kubebuilder:validation:MinItems=1
	APIGroups []string `json:"apiGroups"`
	// APIVersions are the versions; empty means each group's preferred version.
	// +optional
	APIVersions []string `json:"apiVersions,omitempty"`
	// Resources are plural resource names, or "*" for every listable and watchable resource.
	// +kubebuilder:validation:MinItems=1
	Resources []string `json:"resources"`
	// Operations are the changes to mirror; empty means all.
	// +optional
	Operations []Operation `json:"operations,omitempty"`
}

// IgnoreWriters names writers whose changes a rule does not commit: other GitOps controllers
// (Flux, Argo CD) or autoscalers that own what they write.
type IgnoreWriters struct {
	// FieldManagers are managedFields managers (e.g. kustomize-controller, argocd-controller):
	// a change whose last writer of the object's spec (the managedFields entry updated last,
	// status entries never counted) is listed is not committed.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	FieldManagers []string `json:"fieldManagers,omitempty"`
	// Users are user names (e.g. system:serviceaccount:flux-system:kustomize-controller): a
	// change the audit log attributes to one of them is not committed (needs author attribution).
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Users []string `json:"users,omitempty"`
}

// TargetReference names a GitTarget.
type TargetReference struct {
	// Name of the GitTarget.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Namespace of the GitTarget; for a WatchRule it must be empty or the rule's own namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// WatchRuleSpec chooses namespaced resources of the rule's namespace to mirror.
type WatchRuleSpec struct {
	// TargetRef names the GitTarget the resources are written to.
	TargetRef TargetReference `json:"targetRef"`
	// Rules select the resources.
	// +kubebuilder:validation:MinItems=1
	Rules []ResourceRule `json:"rules"`
	// Ignore lists writers whose changes to the selected resources are not committed.
	// +optional
	Ignore *IgnoreWriters `json:"ignore,omitempty"`
	// Suspend stops the rule's watches until it is unset; their files stay in git and their
	// cursors are kept, so the resume commits what changed meanwhile.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// WatchRuleStatus is the observed state of a WatchRule or ClusterWatchRule.
type WatchRuleStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready says the rule resolved to at least one resource of an existing target.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Resources are the resolved resources (<resource>.<group>/<version>).
	// +optional
	Resources []string `json:"resources,omitempty"`
	// Excluded lists matched resources that are not mirrored, and why.
	// +optional
	Excluded []ExcludedResource `json:"excluded,omitempty"`
}

// WatchRule mirrors namespaced resources of its own namespace into a GitTarget.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=siteops;mirror
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Resources",type=string,JSONPath=`.status.resources`,priority=1
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WatchRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WatchRuleSpec   `json:"spec"`
	Status WatchRuleStatus `json:"status,omitempty"`
}

// WatchRuleList is a list of WatchRules.
// +kubebuilder:object:root=true
type WatchRuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WatchRule `json:"items"`
}

// ClusterWatchRuleSpec chooses cluster-scoped resources to mirror.
type ClusterWatchRuleSpec struct {
	// TargetRef names the GitTarget (namespace required) the resources are written to.
	// +kubebuilder:validation:XValidation:rule="size(self.__namespace__) > 0",message="targetRef.namespace is required"
	TargetRef TargetReference `json:"targetRef"`
	// Rules select the resources.
	// +kubebuilder:validation:MinItems=1
	Rules []ResourceRule `json:"rules"`
	// Ignore lists writers whose changes to the selected resources are not committed.
	// +optional
	Ignore *IgnoreWriters `json:"ignore,omitempty"`
}

// ClusterWatchRule mirrors cluster-scoped resources into a GitTarget.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=siteops;mirror
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Target-Namespace",type=string,JSONPath=`.spec.targetRef.namespace`
// +kubebuilder:printcolumn:name="Resources",type=string,JSONPath=`.status.resources`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterWatchRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterWatchRuleSpec `json:"spec"`
	Status WatchRuleStatus      `json:"status,omitempty"`
}

// ClusterWatchRuleList is a list of ClusterWatchRules.
// +kubebuilder:object:root=true
type ClusterWatchRuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterWatchRule `json:"items"`
}

func init() {
	register(&GitProvider{}, &GitProviderList{}, &GitTarget{}, &GitTargetList{},
		&WatchRule{}, &WatchRuleList{}, &ClusterWatchRule{}, &ClusterWatchRuleList{})
}
