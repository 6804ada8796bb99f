package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/testenv"
)

func TestTenantResync(t *testing.T) {
	c := testenv.APIServer(t)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, c.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	managed := c.Namespace(t, "sites-resync", map[string]string{decov1.AnnotationValkeyACL: "true"})
	plain := c.Namespace(t, "plain", nil)
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := NewRootCommand()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"tenant", "resync", "--kubeconfig", kc}, args...))
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	syncValue := func(name string) string {
		var ns corev1.Namespace
		if err := c.Client.Get(context.Background(), client.ObjectKey{Name: name}, &ns); err != nil {
			t.Fatal(err)
		}
		return ns.Annotations[decov1.AnnotationValkeyACLSync]
	}

	out, err := run("--all")
	if err != nil || !strings.Contains(out, "namespace/"+managed+" resync requested") {
		t.Fatalf("resync --all: %v\n%s", err, out)
	}
	first := syncValue(managed)
	if first == "" || syncValue(plain) != "" {
		t.Fatalf("sync annotation: managed %q, plain %q", first, syncValue(plain))
	}
	if _, err := run(managed); err != nil {
		t.Fatal(err)
	}
	if syncValue(managed) == first {
		t.Fatal("a second resync did not change the annotation, so it would not trigger a reconcile")
	}
	if _, err := run(plain); err == nil || !strings.Contains(err.Error(), "not annotated") {
		t.Fatalf("resync of a namespace that does not opt in: %v", err)
	}
	if _, err := run(); err == nil {
		t.Fatal("resync without --all or names succeeded")
	}
	if _, err := run("--all", managed); err == nil {
		t.Fatal("resync with both --all and names succeeded")
	}
}
