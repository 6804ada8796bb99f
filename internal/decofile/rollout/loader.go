package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
)

// Content is the merged Decofile JSON pods must receive, with the timestamp it was stored under.
type Content struct {
	JSON      []byte
	Timestamp int64
}

// Loader reads the content currently stored for a Decofile from where its target keeps it. It
// never holds more than limit bytes of decoded content: past it, it fails with ErrContentTooLarge.
type Loader interface {
	Load(ctx context.Context, df *decov1alpha1.Decofile, limit int64) (Content, error)
}

// ErrNotYetStored says the store does not hold the version the status describes yet (the
// delivery controller writes the store and the status in two steps); the rollout waits.
var ErrNotYetStored = errors.New("stored content is not the version in status yet")

// ErrContentTooLarge says the stored content decodes to more bytes than the rollout accepts:
// more than the size the operator recorded in status, or than the configured content limit.
var ErrContentTooLarge = errors.New("stored content is larger than the operator stored")

// ErrInvalidStoredContent says the stored content is not what the operator stored: it does not
// decode, or its hash differs from the one in status. Such content is never sent to pods.
var ErrInvalidStoredContent = errors.New("stored content is not what the operator stored")

// DefaultMaxContentBytes bounds the decoded content when Options.MaxContentBytes is unset; the
// manager passes --decofile-max-content-bytes.
const DefaultMaxContentBytes = 64 << 20

// ContentLimit is how many decoded bytes a load of df may hold: the size the operator recorded
// in status (RawBytes, which tenants cannot write) when it is known, never more than max.
func ContentLimit(df *decov1alpha1.Decofile, max int64) int64 {
	if max <= 0 {
		max = DefaultMaxContentBytes
	}
	if raw := df.Status.RawBytes; raw > 0 && raw < max {
		return raw
	}
	return max
}

// ConfigMapLoader reads the configmap target: decofile.json, or decofile.bin decoded, and timestamp.txt.
type ConfigMapLoader struct {
	// Reader reads ConfigMaps; use a non-caching reader so the manager does not cache every ConfigMap.
	Reader client.Reader
}

// Load implements Loader. The ConfigMap is tenant-writable, so what it holds is checked against
// what the operator recorded in status before anything is sent: the stored value against
// status.storedHash before decoding, the decoded size against status.rawBytes (within limit)
// while decoding, then the hash of the result against status.contentHash.
func (l ConfigMapLoader) Load(ctx context.Context, df *decov1alpha1.Decofile, limit int64) (Content, error) {
	limit = ContentLimit(df, limit)
	name := df.Status.ConfigMapName
	if name == "" {
		name = df.ConfigMapName()
	}
	var cm corev1.ConfigMap
	if err := l.Reader.Get(ctx, client.ObjectKey{Namespace: df.Namespace, Name: name}, &cm); err != nil {
		return Content{}, fmt.Errorf("read ConfigMap %s: %w", name, err)
	}
	ts, err := strconv.ParseInt(strings.TrimSpace(cm.Data[decov1alpha1.KeyTimestamp]), 10, 64)
	if err != nil {
		return Content{}, fmt.Errorf("ConfigMap %s: %s is not Unix seconds: %w", name, decov1alpha1.KeyTimestamp, err)
	}
	if ts != df.Status.Timestamp {
		return Content{}, fmt.Errorf("ConfigMap %s has timestamp %d, status has %d: %w", name, ts, df.Status.Timestamp, ErrNotYetStored)
	}
	key, value := storedValue(&cm, df.Status.Format)
	if value == "" {
		return Content{}, fmt.Errorf("ConfigMap %s has no %s: %w", name, key, ErrInvalidStoredContent)
	}
	// The stored value must be the one the operator wrote: checked before decoding, so nothing a
	// tenant planted there is ever decompressed.
	if err := verifyStored(value, df.Status.StoredHash); err != nil {
		return Content{}, fmt.Errorf("ConfigMap %s: %s: %w", name, key, err)
	}
	var data []byte
	var sum string
	if key == decov1alpha1.KeyBin {
		data, sum, err = DecodeBin(value, limit, df.Status.RawBytes)
	} else if int64(len(value)) > limit {
		err = fmt.Errorf("%s holds %d bytes, more than %d: %w", key, len(value), limit, ErrContentTooLarge)
	} else {
		data = []byte(value)
		sum = encode.Hash(data)
	}
	if err != nil {
		return Content{}, fmt.Errorf("ConfigMap %s: %w", name, err)
	}
	if err := VerifyHash(sum, df.Status.ContentHash); err != nil {
		return Content{}, fmt.Errorf("ConfigMap %s at timestamp %d: %w", name, ts, err)
	}
	return Content{JSON: data, Timestamp: ts}, nil
}

// storedValue is the ConfigMap key the status says the operator wrote and its value; with no
// format in status, decofile.bin when present, else decofile.json.
func storedValue(cm *corev1.ConfigMap, format decov1alpha1.Format) (string, string) {
	key := decov1alpha1.KeyJSON
	if format == decov1alpha1.FormatBin || format == "" && cm.Data[decov1alpha1.KeyBin] != "" {
		key = decov1alpha1.KeyBin
	}
	return key, cm.Data[key]
}

// verifyStored refuses a stored value whose SHA-256 differs from want, the status.storedHash the
// operator recorded when it wrote the value (empty in statuses written before it was recorded).
func verifyStored(value, want string) error {
	if want == "" {
		return nil
	}
	h := sha256.New()
	_, _ = io.WriteString(h, value) // no copy of the value
	if got := hexSum(h); got != want {
		return fmt.Errorf("stored value hash %s differs from status.storedHash %s (changed outside the operator; "+
			"the delivery controller restores it): %w", got, want, ErrInvalidStoredContent)
	}
	return nil
}

// VerifyHash refuses content whose SHA-256 (hex) got differs from want, the hash the operator
// recorded in status. An empty want (a status written before hashes were recorded) accepts any.
func VerifyHash(got, want string) error {
	if want != "" && got != want {
		return fmt.Errorf("content hash %s differs from the recorded %s: %w", got, want, ErrInvalidStoredContent)
	}
	return nil
}

// DecodeBin decodes a decofile.bin value (base64 of brotli) as a stream, never holding more than
// limit decoded bytes: a value that expands past limit (a brotli bomb) fails with
// ErrContentTooLarge after reading limit+1 bytes. sizeHint, the size the operator recorded, sizes
// the result in one allocation. It returns the JSON and its SHA-256 (hex), computed while
// decoding. Besides the result, the brotli decoder's window buffers (about 32 MiB at most: the
// large-window extension stays off) are the only allocation that depends on the input.
func DecodeBin(value string, limit, sizeHint int64) ([]byte, string, error) {
	if limit <= 0 {
		limit = DefaultMaxContentBytes
	}
	br := brotli.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(value)))
	h := sha256.New()
	data, err := readBounded(io.TeeReader(br, h), limit, sizeHint)
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("decode %s: %w (%w)", decov1alpha1.KeyBin, err, ErrInvalidStoredContent)
	case int64(len(data)) > limit:
		return nil, "", fmt.Errorf("%s decodes to more than %d bytes: %w", decov1alpha1.KeyBin, limit, ErrContentTooLarge)
	}
	return data, hexSum(h), nil
}

// readBounded reads r to its end but never more than limit+1 bytes (one more than limit tells the
// caller it overflowed), into one buffer of sizeHint+1 bytes when the size is known, else into a
// buffer that doubles from 64 KiB but never past limit+1.
func readBounded(r io.Reader, limit, sizeHint int64) ([]byte, error) {
	size := min(int64(64<<10), limit+1)
	if sizeHint > 0 && sizeHint <= limit {
		size = sizeHint + 1
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return buf, nil
			}
			next := make([]byte, len(buf), min(2*int64(cap(buf)), limit+1))
			copy(next, buf)
			buf = next
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }
