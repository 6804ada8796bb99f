package gitwriter

import (
	"context"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// OpKind says what an Op does.
type OpKind int

// Op kinds.
const (
	// OpUpsert writes Change.Content to Change.Path.
	OpUpsert OpKind = iota
	// OpDelete removes Change.Path.
	OpDelete
	// OpMark carries only a cursor: an event that changes no file (skipped, bookmark).
	OpMark
	// OpSweep removes every file under SweepDir whose path is not in Keep (mark-and-sweep after a
	// full replay).
	OpSweep
)

// Signature is a git identity.
type Signature struct {
	Name  string
	Email string
}

// Cursor names the watch position an Op was produced at.
type Cursor struct {
	// TargetUID is the GitTarget's UID.
	TargetUID string
	// GVR is the watched resource.
	GVR schema.GroupVersionResource
	// Namespace is the watched namespace; empty for the cluster scope.
	Namespace string
	// RV is the resourceVersion of the event; empty means the op moves no cursor.
	RV string
}

// Change is one file write or removal.
type Change struct {
	// Path of the file in the repository.
	Path string
	// Content of the file; unused for deletes.
	Content []byte
	// Ref names the object in commit messages: <apiVersion>/<resource>/<namespace>/<name>.
	Ref string
	// Kind is the object's kind, for the list of pending changes; empty when not known.
	Kind string
	// Author made the change; nil means the committer. Per-event author resolution sets it.
	Author *Signature
	// Received is when the watch event arrived, for the event→pushed latency.
	Received time.Time
	// AuditID is the API-server audit event the author was attributed from; empty when none.
	// It becomes the commit's Audit-ID trailer.
	AuditID string
	// Attribution is the result of the author attribution (exact_user, weak, absent, …), the
	// commit's Attribution trailer; empty when the change was not attributed (attribution off,
	// a replayed object), which the trailer states as absent.
	Attribution string
}

// Op is one unit of work for the writer, applied in the order received.
type Op struct {
	Kind OpKind
	// Target is the UID of the GitTarget the op belongs to; a Command claims only its own
	// target's ops. Unlike Cursor it is always set (an op may be handed over without a cursor).
	Target string
	Change Change
	// SweepDir, Keep and SweepRefPrefix describe an OpSweep: Keep holds full file paths; a
	// removed file's commit line is SweepRefPrefix + its name.
	SweepDir       string
	Keep           map[string]struct{}
	SweepRefPrefix string
	// Cursor is recorded once this op is pushed.
	Cursor Cursor
}

// CursorRecorder stores watch cursors durably (the Redis store).
type CursorRecorder interface {
	RecordWatchCursor(ctx context.Context, gitTargetUID string, gvr schema.GroupVersionResource, namespace, rv string) error
}

// Pushed describes one change that reached the remote, for observers.
type Pushed struct {
	Path     string
	Cursor   Cursor
	Received time.Time
	PushedAt time.Time
	Commit   plumbing.Hash
}

// PushedCommit describes one commit of a successful push, for observers.
type PushedCommit struct {
	// Hash of the commit.
	Hash plumbing.Hash
	// Author the commit was authored as.
	Author Signature
	// Attribution holds the values of its Attribution trailer (the attribution results of its
	// changes, such as exact_user or absent), strongest first.
	Attribution []string
	// AuditIDs holds the values of its Audit-ID trailer: the audit events its changes were
	// attributed from, none when no change was.
	AuditIDs []string
	// Subject is the first line of its message.
	Subject string
	// Files counts the files it changed.
	Files int
	// Targets are the UIDs of the GitTargets whose changes it holds.
	Targets []string
	// PushedAt is when the push succeeded.
	PushedAt time.Time
}
