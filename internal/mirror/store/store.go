// Package store is the Redis/Valkey-backed store of the mirror. RedisStore owns the connection
// and the watch resume cursors, which are required in every mode; optional layers (author
// attribution) are built later on the same connection and never affect the cursors.
//
// Key layout (every key starts with the validated key prefix):
//
//	<prefix>:watch:v1:target:<gitTargetUID>:<group/resource>:cluster:last-rv
//	<prefix>:watch:v1:target:<gitTargetUID>:<group/resource>:namespace:<ns>:last-rv
//
// Every field is escaped with escapeKeyField ('%' → "%25", ':' → "%3A") so a field can never
// forge another key's segments.
package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DefaultKeyPrefix is the root namespace of every key when --redis-key-prefix is not set.
const DefaultKeyPrefix = "siteops"

// WatchCursorTTL is how long a resume cursor survives without being refreshed. A live watch
// refreshes it with every record; a cursor of a deleted GitTarget simply expires.
const WatchCursorTTL = 7 * 24 * time.Hour

// watchCursorTTL is the TTL RecordWatchCursor sets; a variable so tests can shorten it.
var watchCursorTTL = WatchCursorTTL

// RedisStoreConfig configures the Redis/Valkey connection that backs the watch resume cursors.
type RedisStoreConfig struct {
	// Addr is host:port of the server; unused when SentinelAddrs is set.
	Addr string
	// SentinelAddrs are host:port of Sentinels that monitor the server as SentinelMaster: the
	// connection follows the master they name, across failovers.
	SentinelAddrs []string
	// SentinelMaster is the name the Sentinels monitor the server under.
	SentinelMaster string
	// SentinelUsername and SentinelPassword authenticate to the Sentinels, when they require it.
	SentinelUsername, SentinelPassword string
	// Username for ACL authentication; empty means the default user.
	Username string
	// AuthValue is the password.
	AuthValue string
	// DB is the logical database number.
	DB int
	// TLSEnabled connects over TLS.
	TLSEnabled bool
	// KeyPrefix is the root namespace of every key this connection's stores own. Empty means
	// DefaultKeyPrefix, so several installations can share one server without sharing a
	// logical database.
	KeyPrefix string
}

// RedisStore is the required Redis/Valkey-backed store. It owns the connection and persists each
// GitTarget watch shard's resume cursor; the readiness probe pings it. It knows nothing about
// attribution.
type RedisStore struct {
	client *redis.Client
	prefix string
}

// NewRedisStore validates cfg and opens the connection that backs the resume cursors. It does not
// wait for the server: use Ping to check it is reachable.
func NewRedisStore(cfg RedisStoreConfig) (*RedisStore, error) {
	if cfg.Addr == "" && len(cfg.SentinelAddrs) == 0 {
		return nil, errors.New("redis store: address is empty: set --redis-addr to host:port, or --redis-sentinel-addrs")
	}
	if len(cfg.SentinelAddrs) > 0 && cfg.SentinelMaster == "" {
		return nil, errors.New("redis store: --redis-sentinel-addrs needs --redis-sentinel-master, the name the Sentinels monitor the server under")
	}
	raw := cfg.KeyPrefix
	if raw == "" {
		raw = DefaultKeyPrefix
	}
	prefix, err := ValidateKeyPrefix(raw)
	if err != nil {
		return nil, err
	}
	opts := &redis.Options{
		Addr:         cfg.Addr,
		Username:     cfg.Username,
		Password:     cfg.AuthValue,
		DB:           cfg.DB,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
		MaxRetries:   1,
	}
	if cfg.TLSEnabled {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if len(cfg.SentinelAddrs) == 0 {
		return &RedisStore{client: redis.NewClient(opts), prefix: prefix}, nil
	}
	// The Sentinels name the master; after a failover the next command reaches the new one.
	return &RedisStore{client: redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:       cfg.SentinelMaster,
		SentinelAddrs:    cfg.SentinelAddrs,
		SentinelUsername: cfg.SentinelUsername,
		SentinelPassword: cfg.SentinelPassword,
		Username:         opts.Username,
		Password:         opts.Password,
		DB:               opts.DB,
		DialTimeout:      opts.DialTimeout,
		ReadTimeout:      opts.ReadTimeout,
		WriteTimeout:     opts.WriteTimeout,
		MaxRetries:       opts.MaxRetries,
		TLSConfig:        opts.TLSConfig,
	}), prefix: prefix}, nil
}

// Close releases the connection.
func (s *RedisStore) Close() error { return s.client.Close() }

// KeyPrefix returns the root namespace every key of this store's family is written under.
func (s *RedisStore) KeyPrefix() string { return s.prefix }

// Ping checks the connection, so the pod is not ready while its cursor store is unreachable.
func (s *RedisStore) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w", err)
	}
	return nil
}

// LookupWatchCursor returns the last resourceVersion durably processed for one GitTarget watch
// shard. A miss (no key, or Redis unreachable) means the watch must rebuild from a fresh replay.
func (s *RedisStore) LookupWatchCursor(ctx context.Context, gitTargetUID string, gvr schema.GroupVersionResource, namespace string) (string, bool) {
	v, err := s.client.Get(ctx, s.watchCursorKey(gitTargetUID, gvr, namespace)).Result()
	if err != nil || v == "" {
		return "", false
	}
	return v, true
}

// RecordWatchCursor stores the last resourceVersion durably processed for one GitTarget watch
// shard, refreshing the TTL on each write. Call it only once the commit holding every event up to
// rv has been pushed.
func (s *RedisStore) RecordWatchCursor(ctx context.Context, gitTargetUID string, gvr schema.GroupVersionResource, namespace, rv string) error {
	if rv == "" {
		return errors.New("record watch cursor: empty resourceVersion")
	}
	if err := s.client.Set(ctx, s.watchCursorKey(gitTargetUID, gvr, namespace), rv, watchCursorTTL).Err(); err != nil {
		return fmt.Errorf("record watch cursor for GitTarget %s %s: %w", gitTargetUID, gvr.GroupResource(), err)
	}
	return nil
}

// watchCursorKey builds the cursor key of one watch shard; an empty namespace is the cluster scope.
func (s *RedisStore) watchCursorKey(gitTargetUID string, gvr schema.GroupVersionResource, namespace string) string {
	var b strings.Builder
	b.WriteString(s.prefix)
	b.WriteString(":watch:v1:target:")
	b.WriteString(escapeKeyField(gitTargetUID))
	b.WriteByte(':')
	b.WriteString(escapeKeyField(gvr.Group + "/" + gvr.Resource))
	if namespace == "" {
		b.WriteString(":cluster")
	} else {
		b.WriteString(":namespace:")
		b.WriteString(escapeKeyField(namespace))
	}
	b.WriteString(":last-rv")
	return b.String()
}

// keyEscaper escapes '%' first-class so an escaped field is never ambiguous.
var keyEscaper = strings.NewReplacer("%", "%25", ":", "%3A")

// escapeKeyField makes a value safe as one ':'-delimited key segment.
func escapeKeyField(v string) string { return keyEscaper.Replace(v) }

// ValidateKeyPrefix checks a --redis-key-prefix value and returns its normalized form.
//
// Redis glob metacharacters (* ? [ ] \) are rejected because SCAN patterns built on the prefix
// would silently match another keyspace; '%' is rejected because escaped key fields use it and an
// escaped key would become ambiguous with an unescaped one. ':' is allowed (a prefix such as
// "cell-a:tenant-7" nests naturally) and a trailing ':' is removed so "t:" and "t" name the same
// keyspace. An empty prefix is rejected: it would silently un-namespace an installation; use
// DefaultKeyPrefix instead.
func ValidateKeyPrefix(prefix string) (string, error) {
	if prefix == "" {
		return "", fmt.Errorf("redis key prefix is empty: omit --redis-key-prefix to use %q", DefaultKeyPrefix)
	}
	if i := strings.IndexAny(prefix, `*?[]\`); i >= 0 {
		return "", fmt.Errorf("redis key prefix %q contains the glob metacharacter %q: use letters, digits, '-', '_', '.' or ':'", prefix, prefix[i])
	}
	if strings.Contains(prefix, "%") {
		return "", fmt.Errorf("redis key prefix %q contains '%%', which escaped key fields use: remove it", prefix)
	}
	normalized := strings.TrimRight(prefix, ":")
	if normalized == "" {
		return "", fmt.Errorf("redis key prefix %q is only ':' separators: give it a name", prefix)
	}
	return normalized, nil
}
