package source

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Bounds of the content a source keeps for other Decofiles following the same commit.
const (
	// shareFor is how long extracted content stays shared: long enough for the burst of
	// reconciles one push starts, short enough that a revoked credential soon stops reading it.
	shareFor = time.Minute
	// shareBytes bounds the block bytes kept.
	shareBytes = 64 << 20
)

// shared lets the Decofiles that follow one repository fetch each commit once: concurrent
// fetches of the same commit, folder and credential join one download (singleflight), and its
// blocks are kept for shareFor so the reconciles of a push that come after it do not download
// again. The key always holds a hash of the credential used: content fetched with one
// credential is never handed to a Decofile that uses another (or none), since the remote
// might not have given it that content.
type shared struct {
	flight singleflight.Group

	mu      sync.Mutex
	entries map[string]sharedEntry
	bytes   int64
	fetches int64 // downloads made (not served from the cache or joined)
}

type sharedEntry struct {
	blocks  Blocks
	size    int64
	expires time.Time
}

// sharedKey builds the key of one fetch from its parts; credential is hashed.
func sharedKey(remote, sha, folder, credential string) string {
	sum := sha256.Sum256([]byte(credential))
	return strings.Join([]string{remote, strings.ToLower(sha), CleanPath(folder), hex.EncodeToString(sum[:])}, "\x00")
}

// fetch returns the blocks of key, from the cache, a download in flight, or download. kind
// names the source (git, github) in the metrics.
func (s *shared) fetch(kind, key string, download func() (Blocks, error)) (Blocks, error) {
	if b, ok := s.get(kind, key); ok {
		return b, nil
	}
	downloaded := false
	v, err, _ := s.flight.Do(key, func() (any, error) {
		if b, ok := s.lookup(key); ok { // stored by a flight that ended since the look above
			return b, nil
		}
		downloaded = true
		s.mu.Lock()
		s.fetches++
		s.mu.Unlock()
		b, err := download()
		if err != nil {
			return nil, err
		}
		s.put(key, b)
		return b, nil
	})
	if err != nil {
		return nil, err
	}
	if downloaded {
		fetchesTotal.WithLabelValues(kind, fetchDownloaded).Inc()
	} else {
		fetchesTotal.WithLabelValues(kind, fetchShared).Inc()
	}
	// The map a caller gets is its own; the values are shared and never written to.
	return maps.Clone(v.(Blocks)), nil
}

// get returns the blocks kept for key, counted as a shared fetch.
func (s *shared) get(kind, key string) (Blocks, bool) {
	b, ok := s.lookup(key)
	if ok {
		fetchesTotal.WithLabelValues(kind, fetchShared).Inc()
	}
	return b, ok
}

func (s *shared) lookup(key string) (Blocks, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return nil, false
	}
	if time.Now().After(e.expires) {
		s.drop(key, e)
		return nil, false
	}
	return maps.Clone(e.blocks), true
}

func (s *shared) put(key string, b Blocks) {
	var size int64
	for k, v := range b {
		size += int64(len(k) + len(v))
	}
	if size > shareBytes/4 {
		return // one large site does not push every other out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries == nil {
		s.entries = map[string]sharedEntry{}
	}
	now := time.Now()
	for k, e := range s.entries {
		if now.After(e.expires) {
			s.drop(k, e)
		}
	}
	for k, e := range s.entries { // still over: drop any until it fits (all expire soon anyway)
		if s.bytes+size <= shareBytes {
			break
		}
		s.drop(k, e)
	}
	if old, ok := s.entries[key]; ok {
		s.drop(key, old)
	}
	s.entries[key] = sharedEntry{blocks: b, size: size, expires: now.Add(shareFor)}
	s.bytes += size
}

func (s *shared) drop(key string, e sharedEntry) {
	delete(s.entries, key)
	s.bytes -= e.size
}

// downloads is how many fetches went to a remote.
func (s *shared) downloads() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}
