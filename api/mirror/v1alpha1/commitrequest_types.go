package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CommitRequest condition types and reasons.
const (
	// ConditionCommitted says whether the request's commit was made and pushed.
	ConditionCommitted = "Committed"
	// ConditionAuthorAttributed says who authors the commit: the submitter recorded at admission
	// (True) or the committer, because no record was captured (False).
	ConditionAuthorAttributed = "AuthorAttributed"

	// ReasonCommandAuthor: the submitter recorded by the admission webhook authors the commit.
	ReasonCommandAuthor = "CommandAuthor"
	// ReasonCommitterFallback: no submitter was recorded (webhook not configured or down, or
	// Redis unreachable at admission), so the committer authors the commit.
	ReasonCommitterFallback = "CommitterFallback"
	// ReasonPushed: the commit reached the remote.
	ReasonPushed = "Pushed"
	// ReasonNothingPending: the target's window held no change; nothing was committed.
	ReasonNothingPending = "NothingPending"
	// ReasonTargetNotFound: the GitTarget does not exist or is not running.
	ReasonTargetNotFound = "TargetNotFound"
	// ReasonCommitFailed: committing or pushing failed; the request is retried.
	ReasonCommitFailed = "CommitFailed"
	// ReasonCommitting: the commit is being made and pushed (Committed=Unknown); a request
	// found so again looks for its commit in the branch's history before committing.
	ReasonCommitting = "Committing"
	// ReasonPending: the request has not been processed yet.
	ReasonPending = "Pending"
)

// CommitRequestSpec asks the mirror to close a GitTarget's open commit window now.
type CommitRequestSpec struct {
	// TargetRef names the GitTarget, in the request's namespace (namespace must be empty or the
	// request's own).
	TargetRef TargetReference `json:"targetRef"`
	// Message is the commit message of the commit that closes the window.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	Message string `json:"message"`
}

// CommitRequestStatus is the observed state of a CommitRequest.
type CommitRequestStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Committed (and Ready) say whether the commit was pushed; AuthorAttributed says
	// whether the submitter or the committer authors it.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Commit is the hash of the commit made for the request; empty when nothing was pending.
	// +optional
	Commit string `json:"commit,omitempty"`
	// Author is the commit author as "Name <email>".
	// +optional
	Author string `json:"author,omitempty"`
	// CompletionTime is when the request finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// CommitRequest is a one-shot command: close the target's open commit window now and commit the
// pending changes with the given message, authored by whoever created the request.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=siteops;mirror
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Committed",type=string,JSONPath=`.status.conditions[?(@.type=="Committed")].status`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.commit`
// +kubebuilder:printcolumn:name="Author",type=string,JSONPath=`.status.author`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CommitRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: create a new CommitRequest"
	Spec   CommitRequestSpec   `json:"spec"`
	Status CommitRequestStatus `json:"status,omitempty"`
}

// CommitRequestList is a list of CommitRequests.
// +kubebuilder:object:root=true
type CommitRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CommitRequest `json:"items"`
}

func init() {
	register(&CommitRequest{}, &CommitRequestList{})
}
