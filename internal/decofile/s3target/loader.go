package s3target

import (
	"context"
	"errors"
	"fmt"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/rollout"
)

// Loader gives the rollout controller the merged JSON of an s3-target Decofile, read back from
// the bucket (with the operator's credentials, so a private bucket behind a CDN works too).
type Loader struct {
	Store *Store
}

var _ rollout.Loader = Loader{}

// Load implements rollout.Loader. The delivery controller uploads before it records the new
// hash in status, so an object newer than the status means the status is about to catch up.
func (l Loader) Load(ctx context.Context, df *decov1.Decofile, limit int64) (rollout.Content, error) {
	if df.Status.S3URL == "" {
		// The target was just flipped to s3: the status still describes the ConfigMap content
		// until the delivery controller has uploaded it.
		return rollout.Content{}, fmt.Errorf("status does not name an uploaded object yet: %w", rollout.ErrNotYetStored)
	}
	obj, err := l.Store.Get(ctx, df, limit)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return rollout.Content{}, fmt.Errorf("%w; the delivery controller uploads it again on its next change", err)
		}
		return rollout.Content{}, err
	}
	if h := encode.Hash(obj.JSON); h != df.Status.ContentHash {
		if obj.Timestamp > df.Status.Timestamp {
			return rollout.Content{}, fmt.Errorf("%s has timestamp %d, status has %d: %w", l.Store.Describe(df), obj.Timestamp, df.Status.Timestamp, rollout.ErrNotYetStored)
		}
		return rollout.Content{}, fmt.Errorf("%s holds content with hash %s but status.contentHash is %s", l.Store.Describe(df), h, df.Status.ContentHash)
	}
	return rollout.Content{JSON: obj.JSON, Timestamp: df.Status.Timestamp}, nil
}

var _ rollout.LastGoodStore = Loader{}

// KeepLastGood implements rollout.LastGoodStore: content every pod confirmed is copied to the
// object beside df's (LastGoodKey). The bytes uploaded are the ones the rollout controller read
// back and checked against status.contentHash, not a server-side copy of whatever the object
// holds by the time the copy is made.
func (l Loader) KeepLastGood(ctx context.Context, df *decov1.Decofile, content []byte, hash string, ts int64) error {
	if err := l.Store.put(ctx, df, l.Store.LastGoodKey(df), content, hash, ts); err != nil {
		return fmt.Errorf("keep the last good content: %w", err)
	}
	return nil
}

// LoadLastGood implements rollout.LastGoodStore: the last good copy, at most limit bytes.
func (l Loader) LoadLastGood(ctx context.Context, df *decov1.Decofile, limit int64) ([]byte, error) {
	return l.Store.LoadLastGood(ctx, df, limit)
}

// Restore implements rollout.LastGoodStore: content is uploaded again as df's object, under
// timestamp ts, exactly as the delivery controller uploads it.
func (l Loader) Restore(ctx context.Context, df *decov1.Decofile, content []byte, hash string, ts int64) error {
	return l.Store.Put(ctx, df, content, hash, ts)
}
