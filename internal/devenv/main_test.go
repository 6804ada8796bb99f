package devenv_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/siteops/siteops/internal/devenv"
	"github.com/siteops/siteops/internal/manager"
)

var (
	sharedOnce sync.Once
	shared     *devenv.Env
	sharedErr  error
	sharedDir  string
)

// TestMain stops the package's one dev environment after the last test: controller-runtime
// allows each controller name once per process, so the tests share it.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop dev environment:", err)
		}
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// devEnv is the dev environment with the Decofile and mirror parts, started on first use.
func devEnv(t *testing.T) *devenv.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver; skipped in -short mode")
	}
	sharedOnce.Do(func() {
		mo := manager.DefaultOptions()
		mo.Controllers = []string{manager.PartDecofile, manager.PartMirror}
		if sharedDir, sharedErr = os.MkdirTemp("", "devenv-test-"); sharedErr != nil {
			return
		}
		shared, sharedErr = devenv.Start(context.Background(), devenv.Options{KubeconfigPath: sharedDir + "/kubeconfig", Manager: mo, Out: io.Discard})
	})
	if sharedErr != nil {
		t.Fatalf("start dev environment: %v", sharedErr)
	}
	// The manager logs nowhere in tests: say so when it stopped under a failing test.
	t.Cleanup(func() {
		if stopped, err := shared.ManagerStopped(); t.Failed() && stopped {
			t.Logf("the dev environment's manager has stopped: %v", err)
		}
	})
	return shared
}
