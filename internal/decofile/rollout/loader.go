package rollout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

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

// Loader reads the content currently stored for a Decofile from where its target keeps it.
type Loader interface {
	Load(ctx context.Context, df *decov1alpha1.Decofile) (Content, error)
}

// ErrNotYetStored says the store does not hold the version the status describes yet (the
// delivery controller writes the store and the status in two steps); the rollout waits.
var ErrNotYetStored = errors.New("stored content is not the version in status yet")

// MaxContentBytes bounds the JSON decoded from a decofile.bin.
const MaxContentBytes = 256 << 20

// ConfigMapLoader reads the configmap target: decofile.json, or decofile.bin decoded, and timestamp.txt.
type ConfigMapLoader struct {
	// Reader reads ConfigMaps; use a non-caching reader so the manager does not cache every ConfigMap.
	Reader client.Reader
}

// Load implements Loader.
func (l ConfigMapLoader) Load(ctx context.Context, df *decov1alpha1.Decofile) (Content, error) {
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
	var data []byte
	switch {
	case cm.Data[decov1alpha1.KeyBin] != "":
		data, err = encode.Decode(decov1alpha1.FormatBin, cm.Data[decov1alpha1.KeyBin], MaxContentBytes)
	case cm.Data[decov1alpha1.KeyJSON] != "":
		data, err = encode.Decode(decov1alpha1.FormatJSON, cm.Data[decov1alpha1.KeyJSON], MaxContentBytes)
	default:
		return Content{}, fmt.Errorf("ConfigMap %s has neither %s nor %s", name, decov1alpha1.KeyJSON, decov1alpha1.KeyBin)
	}
	if err != nil {
		return Content{}, fmt.Errorf("ConfigMap %s: %w", name, err)
	}
	if h := encode.Hash(data); df.Status.ContentHash != "" && h != df.Status.ContentHash {
		return Content{}, fmt.Errorf("ConfigMap %s holds content with hash %s but status.contentHash is %s at the same timestamp %d",
			name, h, df.Status.ContentHash, ts)
	}
	return Content{JSON: data, Timestamp: ts}, nil
}
