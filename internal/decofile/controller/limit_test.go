package controller_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
)

// TestConfigMapLimitMatchesAPIServer: the largest value encode.Fits accepts is exactly what the
// API server accepts (with the longest timestamp), and one byte more is refused by it.
func TestConfigMapLimitMatchesAPIServer(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "limit", nil)
	n := encode.ConfigMapLimit
	for !encode.Fits(n, encode.ConfigMapLimit) {
		n--
	}
	ts := strings.Repeat("9", 20)
	mk := func(name string, size int) error {
		return e.c.Client.Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Data:       map[string]string{decov1.KeyBin: strings.Repeat("A", size), decov1.KeyTimestamp: ts},
		})
	}
	if err := mk("fits", n); err != nil {
		t.Fatalf("the API server refused a value encode.Fits accepts (%d bytes): %v", n, err)
	}
	if err := mk("over", n+1); !apierrors.IsInvalid(err) {
		t.Fatalf("one byte over the budget: want Invalid from the API server, got %v", err)
	}
}
