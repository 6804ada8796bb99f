package controller

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
)

// TestAdoptableRefusesFarFutureTimestamp: content that matches is adopted with its timestamp,
// unless that timestamp is far ahead, which would pin every later one above it.
func TestAdoptableRefusesFarFutureTimestamp(t *testing.T) {
	js := `{"home":{"title":"Home"}}`
	hash := encode.Hash([]byte(js))
	cm := func(ts int64) *corev1.ConfigMap {
		return &corev1.ConfigMap{Data: map[string]string{decov1.KeyJSON: js, decov1.KeyTimestamp: strconv.FormatInt(ts, 10)}}
	}
	now := time.Now().Unix()
	if a, ok := adoptable(cm(now), hash, 1<<20, encode.DefaultBounds); !ok || a.ts != now {
		t.Fatalf("matching content at the current time not adopted: %v %v", a, ok)
	}
	for _, ts := range []int64{now + 2*86400, 1<<63 - 1} {
		if _, ok := adoptable(cm(ts), hash, 1<<20, encode.DefaultBounds); ok {
			t.Errorf("timestamp %d adopted", ts)
		}
	}
}
