// Package result holds what the cache probe (test/cacheprobe) reports, as JSON: the line a
// one-shot probe prints and the counts a looping probe serves, for the tests that read them.
package result

// Result is the line the probe prints, as JSON.
type Result struct {
	// User is the username the pod was given.
	User string `json:"user"`
	// Auth is "ok" or the error of authenticating.
	Auth string `json:"auth"`
	// OwnWrite and OwnRead are the answers for the key <user>:probe.
	OwnWrite string `json:"ownWrite"`
	OwnRead  string `json:"ownRead"`
	// OtherRead and OtherWrite are the answers for the other tenant's key.
	OtherRead  string `json:"otherRead"`
	OtherWrite string `json:"otherWrite"`
	// Anonymous is the answer to a command sent without credentials (the default user).
	Anonymous string `json:"anonymous"`
}

// Counts are what a looping probe has seen since it started, served as JSON.
type Counts struct {
	User string `json:"user"`
	// OwnOK and OwnFailed count rounds of writing and reading back the probe's own key.
	OwnOK     int64 `json:"ownOK"`
	OwnFailed int64 `json:"ownFailed"`
	// LockoutMaxMillis is the longest time the probe could not use its own key, from its first
	// failed round to the next good one.
	LockoutMaxMillis int64 `json:"lockoutMaxMillis"`
	// OtherRefused counts reads of the other tenant's key refused with NOPERM; OtherRead counts
	// reads that returned anything else but an error: a break of the isolation.
	OtherRefused int64  `json:"otherRefused"`
	OtherRead    int64  `json:"otherRead"`
	LastError    string `json:"lastError,omitempty"`
}
