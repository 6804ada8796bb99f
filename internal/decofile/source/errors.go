package source

import (
	"errors"
	"fmt"
)

// Reasons name what went wrong in a way suitable for a condition's reason.
const (
	// ReasonInvalidContent: a block file is not valid JSON, or there are no block files.
	ReasonInvalidContent = "InvalidContent"
	// ReasonNameCollision: two files map to the same block name.
	ReasonNameCollision = "NameCollision"
	// ReasonLimitExceeded: the archive, the content or the file count is over a limit.
	ReasonLimitExceeded = "LimitExceeded"
	// ReasonInvalidArchive: the archive or repository could not be read.
	ReasonInvalidArchive = "InvalidArchive"
	// ReasonNotFound: the repository, ref or commit does not exist (or is not visible).
	ReasonNotFound = "NotFound"
	// ReasonUnauthorized: the credentials were refused.
	ReasonUnauthorized = "Unauthorized"
	// ReasonUnavailable: the remote failed or could not be reached; retried with backoff.
	ReasonUnavailable = "SourceUnavailable"
	// ReasonCredentials: the referenced Secret is missing or lacks the expected key.
	ReasonCredentials = "CredentialsInvalid"
	// ReasonNotAllowed: the URL's scheme or destination is refused by the platform's source URL
	// policy (--source-allowed-schemes, --source-allowed-hosts, --source-allow-private-networks).
	ReasonNotAllowed = "SourceNotAllowed"
)

// Error is a retrieval failure with a condition reason and whether retrying may help.
type Error struct {
	// Reason is one of the Reason constants.
	Reason string
	// Transient errors are retried with backoff; others wait for a change of the spec or source.
	Transient bool
	// Err says what failed and what to do.
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// AsError returns err as *Error, treating unknown errors as transient unavailability.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Reason: ReasonUnavailable, Transient: true, Err: err}
}

func errorf(reason string, transient bool, format string, args ...any) *Error {
	return &Error{Reason: reason, Transient: transient, Err: fmt.Errorf(format, args...)}
}
