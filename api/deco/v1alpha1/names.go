package v1alpha1

// Names read by software outside this project (the Deco site runtime, users' manifests).
// Changing any of them breaks running sites.
const (
	// AnnotationInject on a workload asks the webhook to inject a Decofile: "true", "default" or a Decofile name.
	AnnotationInject = "deco.sites/decofile-inject"
	// AnnotationMountPath overrides where the Decofile ConfigMap is mounted (default DefaultMountPath).
	AnnotationMountPath = "deco.sites/decofile-mount-path"
	// AnnotationContainer names the container that receives the Decofile env (default "app", else the first).
	AnnotationContainer = "deco.sites/decofile-container"
	// AnnotationReloadPort overrides the port the operator uses for a pod's reload endpoint.
	AnnotationReloadPort = "deco.sites/reload-port"
	// AnnotationReloadAcceptEncoding on a pod lists the request content codings its reload
	// endpoint accepts ("br", "gzip", comma-separated, as an Accept-Encoding value), for runtimes
	// that accept a compressed push body but do not advertise it on their answers.
	AnnotationReloadAcceptEncoding = "deco.sites/reload-accept-encoding"
	// AnnotationValkeyACL on a namespace opts it into a per-tenant Valkey ACL user.
	AnnotationValkeyACL = "deco.sites/valkey-acl"
	// AnnotationValkeyACLSync on a namespace forces a resync of its ACL user when its value changes.
	AnnotationValkeyACLSync = "deco.sites/valkey-acl-sync"
	// AnnotationValkeyACLInject on a workload asks for the valkey-acl Secret without a Decofile.
	AnnotationValkeyACLInject = "deco.sites/valkey-acl-inject"
	// AnnotationValkeyACLRotate on a namespace rotates the tenant password when its value changes.
	AnnotationValkeyACLRotate = "deco.sites/valkey-acl-rotate"
	// AnnotationReconcileRequestedAt on a Decofile asks for an immediate re-resolve of its source
	// when its value changes (any string, by convention an RFC 3339 time, as Flux's
	// reconcile.fluxcd.io/requestedAt); the value handled last is status.lastHandledReconcileAt.
	AnnotationReconcileRequestedAt = "deco.sites/reconcile-requested-at"

	// LabelDecofile on a pod names the Decofile it was injected with.
	LabelDecofile = "deco.sites/decofile"
	// LabelDeploymentID is the label older workloads carry; kept for compatibility.
	LabelDeploymentID = "app.deco/deploymentId"
	// LabelManagedBy marks objects this operator owns.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy on objects this operator owns.
	ManagedByValue = "siteops"

	// EnvRelease tells the site runtime where to load the Decofile from at cold start.
	EnvRelease = "DECO_RELEASE"
	// EnvAllowedAuthorities lists the hosts the runtime may load a Decofile from over HTTPS.
	EnvAllowedAuthorities = "DECO_ALLOWED_AUTHORITIES"
	// EnvReloadToken is the token the runtime expects on POST /.decofile/reload.
	EnvReloadToken = "DECO_RELEASE_RELOAD_TOKEN"
	// DefaultAllowedAuthorities is the runtime's built-in list, kept when EnvAllowedAuthorities is merged.
	DefaultAllowedAuthorities = "configs.decocdn.com,configs.deco.cx,admin.deco.cx,localhost"

	// KeyJSON is the ConfigMap key holding the merged Decofile as JSON.
	KeyJSON = "decofile.json"
	// KeyBin is the ConfigMap key holding base64 of the brotli-compressed merged JSON.
	KeyBin = "decofile.bin"
	// KeyTimestamp is the ConfigMap key holding the Unix-seconds version of the content.
	KeyTimestamp = "timestamp.txt"
	// ReloadTokenKey is the key of the reload token in the Decofile's reload Secret.
	ReloadTokenKey = "token"
	// DefaultMountPath is where the Decofile ConfigMap is mounted in the site container.
	DefaultMountPath = "/app/decofile"
	// ReloadPath is the site runtime's reload endpoint.
	ReloadPath = "/.decofile/reload"

	// ValkeyACLSecretName is the Secret holding a tenant's Valkey credentials.
	ValkeyACLSecretName = "valkey-acl"
	// ValkeyACLUsernameKey is the Secret key with the tenant's Valkey username.
	ValkeyACLUsernameKey = "LOADER_CACHE_REDIS_USERNAME"
	// ValkeyACLPasswordKey is the Secret key with the tenant's Valkey password.
	ValkeyACLPasswordKey = "LOADER_CACHE_REDIS_PASSWORD"
)

// Condition types and reasons recorded on a Decofile.
const (
	// ConditionReady is True when the current content is stored where pods load it from and,
	// unless the Decofile is silent, every running pod confirmed it (status.notifiedHash).
	ConditionReady = "Ready"
	// ConditionPodsNotified tracks the rollout of the current content to running pods.
	ConditionPodsNotified = "PodsNotified"
	// ConditionReconciling (kstatus, abnormal-true) is True while a transient delivery failure
	// is being retried and while stored content is being rolled out to the pods; removed once
	// the content is delivered.
	ConditionReconciling = "Reconciling"
	// ConditionStalled (kstatus, abnormal-true) is True when delivery failed in a way retrying
	// cannot fix (too large, invalid content, a refused source, a conflict); removed once the
	// content is stored.
	ConditionStalled = "Stalled"

	// ReasonSucceeded: the content is stored.
	ReasonSucceeded = "Succeeded"
	// ReasonS3Uploaded: the content is stored as an S3 object.
	ReasonS3Uploaded = "S3Uploaded"
	// ReasonProgressing: the content is being fetched or stored.
	ReasonProgressing = "Progressing"
	// ReasonRollingOut: the content is stored and not every pod has confirmed it yet
	// (Ready=Unknown, Reconciling=True).
	ReasonRollingOut = "RollingOut"
	// ReasonPodsBehind: the content is stored, a rollout to the pods failed and is retried with
	// backoff (Ready=False, Reconciling=True); PodsNotified names the pods.
	ReasonPodsBehind = "PodsBehind"
	// ReasonTargetNotSupported: spec.target names a target siteops does not deliver
	// (tanstack-kv, served by the published Decofile operator v0.11); the Decofile and what it
	// stored are left as they are.
	ReasonTargetNotSupported = "TargetNotSupported"
	// ReasonTooLarge: even the compressed form does not fit in a ConfigMap.
	ReasonTooLarge = "TooLarge"
	// ReasonRolledBack: a progressive rollout rejected the source's version and the last good
	// content is stored again (Ready=False, Stalled=True until the source changes); also the
	// PodsNotified reason once the pods have it back.
	ReasonRolledBack = "RolledBack"
	// ReasonRollbackFailed: a progressive rollout rejected the source's version and the last
	// good content could not be restored; the pods reached keep the rejected version.
	ReasonRollbackFailed = "RollbackFailed"
	// ReasonDeploymentIDConflict: an older Decofile of the namespace has the same deploymentId;
	// this one is not delivered (they would share pods and an S3 object).
	ReasonDeploymentIDConflict = "DeploymentIDConflict"
	// ReasonNotificationInProgress: pods are being notified.
	ReasonNotificationInProgress = "NotificationInProgress"
	// ReasonNotificationSucceeded: every pod confirmed the current content.
	ReasonNotificationSucceeded = "NotificationSucceeded"
	// ReasonNotificationFailed: at least one pod did not confirm the current content.
	ReasonNotificationFailed = "NotificationFailed"
)

// PhaseRollingBack is status.rollout.phase while a progressive rollout's rollback runs: the
// rollout controller asks the delivery controller, which owns the stored content, to store the
// last good content again, and then sends it to the pods.
const PhaseRollingBack = "RollingBack"
