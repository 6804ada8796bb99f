package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ChromiumPath is Debian's Chromium, which `make test-deps` installs.
const ChromiumPath = "/usr/bin/chromium"

// Browser is a headless Chromium tab driven by chromedp, with what its pages reported to the
// console.
type Browser struct {
	// Ctx runs chromedp actions in the tab.
	Ctx context.Context

	mu       sync.Mutex
	problems []string
}

// NewBrowser starts Debian's Chromium headless at 1280×800 with a fresh profile, for as long as
// the test runs. Without Chromium it skips the test, or fails it under CI, where make test-deps
// installs it. extra are more Chromium options (TrustCertificates).
func NewBrowser(t testing.TB, extra ...chromedp.ExecAllocatorOption) *Browser {
	t.Helper()
	path, err := exec.LookPath(ChromiumPath)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no Chromium at %s: run make test-deps", ChromiumPath)
		}
		t.Skipf("no Chromium at %s (make test-deps installs it)", ChromiumPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800),
		// The machine's network is closed: no background traffic, updates or sync.
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
	}
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &Browser{Ctx: ctx}
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start Chromium: %v", err)
	}
	// Console subscribes as it returns: exceptions, console errors and the browser log's errors
	// (CSP violations, failed loads) are kept from the first page on.
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				b.report(string(m.Type) + ": " + m.Text)
			}
		}
	}()
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return b
}

func (b *Browser) report(p string) {
	if strings.Contains(p, "net::ERR_NETWORK_CHANGED") {
		// Tests beside this one add and remove network interfaces (a real node's pods, network
		// namespaces); Chromium then aborts the loads in flight. Not the page's doing: a load
		// that mattered fails the test's own checks of the page.
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, p)
}

// Problems returns the errors the pages reported (exceptions, console errors, CSP violations,
// failed loads) and forgets them.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}

// Do runs steps in the tab, failing the test on error.
func (b *Browser) Do(t testing.TB, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// Eval evaluates a JavaScript expression in the page, failing the test on error.
func Eval[T any](t testing.TB, b *Browser, expr string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// Screenshot saves the viewport as a PNG test artifact, in $SITEOPS_TEST_ARTIFACTS or the
// module's bin/artifacts, and returns its path.
func (b *Browser) Screenshot(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("SITEOPS_TEST_ARTIFACTS")
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "bin", "artifacts")
	}
	dir = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "-"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("browser: screenshot: %v", err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
	return path
}

// String names the browser in failure messages.
func (b *Browser) String() string { return fmt.Sprintf("Chromium (%s)", ChromiumPath) }
