package controller_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/testenv"
)

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func testenv_eventually(t *testing.T, check func() error) {
	t.Helper()
	testenv.Eventually(t, waitFor, check)
}

func testenv_eventuallyCM(t *testing.T, e *env, ns, name string, ok func(*corev1.ConfigMap) bool) {
	t.Helper()
	testenv.Eventually(t, waitFor, func() error {
		var cm corev1.ConfigMap
		if err := e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "decofile-" + name}, &cm); err != nil {
			return err
		}
		if !ok(&cm) {
			return errors.New("ConfigMap not as expected yet")
		}
		return nil
	})
}
