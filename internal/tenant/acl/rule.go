// Package acl manages tenant ACL users on every node of a Valkey/Redis deployment: the master
// (found through Sentinel) and every replica Sentinel reports as up, because ACL commands are not
// replicated. Commands are pipelined per node so thousands of tenants sync in a few round trips.
package acl

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
)

// DeniedCommands are refused to tenants although @read/@write/@connection grant them: they
// enumerate or wipe the shared keyspace, or read or change the server. Most are @dangerous or
// @admin, which the rule denies as a whole; they are named again so the rule stays safe should a
// server version file one of them elsewhere. SCAN, RANDOMKEY and DBSIZE are in neither category.
// CLIENT TRACKING is @connection: its broadcast mode pushes the name of every key written, whatever
// the client's key patterns, so it and CLIENT CACHING (which only serves it) are refused too. The
// rest of @connection that reaches other clients (CLIENT LIST, KILL, PAUSE, UNBLOCK, NO-EVICT) is
// @admin or @dangerous on Redis 7.0; CLIENT INFO, ID and GETNAME describe only the caller.
var DeniedCommands = []string{"scan", "randomkey", "dbsize", "keys", "flushall", "flushdb", "swapdb", "config", "debug", "monitor", "client|tracking", "client|caching"}

// User is a tenant ACL user with the passwords that must be accepted.
type User struct {
	// Name is the ACL username.
	Name string
	// Password is the current password, given in clear; only its digest is ever sent. A resync
	// does not know it and sets PasswordHash instead.
	Password string
	// PasswordHash is the SHA-256 hex digest of the current password; used when Password is empty.
	PasswordHash string
	// RetiredHashes are SHA-256 hex digests of earlier passwords that stay valid until the
	// workloads using them are rolled.
	RetiredHashes []string
}

// CurrentHash returns the SHA-256 hex digest of the current password.
func (u User) CurrentHash() string {
	if u.Password != "" {
		return HashPassword(u.Password)
	}
	return u.PasswordHash
}

var (
	nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidHash reports whether h is a SHA-256 hex digest as Valkey stores it (64 lower-case hex).
func ValidHash(h string) bool { return hashRE.MatchString(h) }

// Validate reports what makes u unusable in ACL SETUSER: a name that is not a DNS label (every
// tenant name comes from a namespace name, so anything else was forged or corrupted), no current
// password, or a digest that is not 64 hex characters. It never quotes a password.
func (u User) Validate() error {
	var errs []error
	if !nameRE.MatchString(u.Name) {
		errs = append(errs, fmt.Errorf("username %q is not a DNS label", u.Name))
	}
	if u.Password == "" && !ValidHash(u.PasswordHash) {
		errs = append(errs, errors.New("no current password, or its digest is not 64 hex characters"))
	}
	for i, h := range u.RetiredHashes {
		if !ValidHash(h) {
			errs = append(errs, fmt.Errorf("retiring digest #%d is not 64 hex characters", i+1))
		}
	}
	return errors.Join(errs...)
}

// Hashes returns the SHA-256 hex digests of every password the user accepts, sorted.
func (u User) Hashes() []string {
	out := []string{u.CurrentHash()}
	for _, h := range u.RetiredHashes {
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// SetUserArgs returns the complete ACL SETUSER command for u. It starts with reset so the result
// does not depend on what the node had before: the rule is declarative, and a resync never adds up
// permissions from older versions of the rule.
func SetUserArgs(u User) []any {
	current := u.CurrentHash()
	// Only digests go to a node, never a password it could log in with elsewhere: the node may
	// not be ours (a master a tampered Sentinel reports).
	args := []any{"acl", "setuser", u.Name, "reset", "on", "#" + current}
	for _, h := range u.RetiredHashes {
		if h != current {
			args = append(args, "#"+h)
		}
	}
	// Each rule costs the server time on every SETUSER of every tenant: keep the list short.
	args = append(args,
		"~"+u.Name+":*", "~lock:"+u.Name+":*", "resetchannels",
		"-@all", "+@read", "+@write", "+@connection", "+@transaction", "+ping",
		"-@dangerous", "-@admin", "-@pubsub", "-@scripting",
	)
	for _, c := range DeniedCommands {
		args = append(args, "-"+c)
	}
	return args
}

// HashPassword returns the SHA-256 hex digest Valkey stores for password.
func HashPassword(password string) string {
	sum := sha256.Sum256([]byte(password))
	return hex.EncodeToString(sum[:])
}

// NewPassword returns 32 random bytes from crypto/rand, URL-safe base64 encoded without padding.
func NewPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate tenant password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
