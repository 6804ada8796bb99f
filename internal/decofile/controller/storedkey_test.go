package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// TestStoredKey: the workloads reading the ConfigMap are looked up only when the new content
// would go under another key than the one pods load now: the ConfigMap's own key, else the
// one the injection webhook points workloads at, and always when the ConfigMap holds both.
func TestStoredKey(t *testing.T) {
	withFormat := func(f decov1.Format) *decov1.Decofile {
		return &decov1.Decofile{Status: decov1.DecofileStatus{Format: f}}
	}
	cm := func(keys ...string) *corev1.ConfigMap {
		c := &corev1.ConfigMap{Data: map[string]string{decov1.KeyTimestamp: "1"}}
		for _, k := range keys {
			c.Data[k] = "x"
		}
		return c
	}
	for _, tc := range []struct {
		name string
		cm   *corev1.ConfigMap
		df   *decov1.Decofile
		want string
	}{
		{"never delivered", nil, withFormat(""), decov1.KeyJSON},
		{"ConfigMap gone, status says bin", nil, withFormat(decov1.FormatBin), decov1.KeyBin},
		{"v0.11 ConfigMap with decofile.bin", cm(decov1.KeyBin), withFormat(""), decov1.KeyBin},
		{"ConfigMap wins over status", cm(decov1.KeyJSON), withFormat(decov1.FormatBin), decov1.KeyJSON},
		{"both keys", cm(decov1.KeyJSON, decov1.KeyBin), withFormat(decov1.FormatJSON), ""},
		{"ConfigMap without content", cm(), withFormat(decov1.FormatBin), decov1.KeyBin},
	} {
		if got := storedKey(tc.cm, tc.df); got != tc.want {
			t.Errorf("%s: storedKey = %q, want %q", tc.name, got, tc.want)
		}
	}
}
