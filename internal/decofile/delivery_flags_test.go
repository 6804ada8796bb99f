package decofile

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/source"
)

func TestDeliveryFlags(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	o.BindFlags(fs)
	if o.Delivery.GitHubAPIURL != source.DefaultGitHubAPIURL || o.Delivery.CompressionThreshold != encode.DefaultThreshold || o.Delivery.Limits != derivedContent(source.DefaultLimits) {
		t.Fatalf("defaults %+v", o.Delivery)
	}
	t.Setenv("GITHUB_TOKEN", "from-env")
	err := fs.Parse([]string{"--github-api-url=http://127.0.0.1:1/api", "--github-archive-url=http://127.0.0.1:1/zip",
		"--github-token-orgs=acme,Other", "--compression-threshold=1000", "--decofile-max-files=5", "--decofile-max-content-bytes=99",
		"--github-token-grants=shop=other/shop,agency=acme/*", "--source-timeout=7s", "--source-allowed-schemes=https,http",
		"--source-allowed-hosts=git.internal,10.0.0.0/8", "--source-allow-private-networks",
		"--source-per-remote=3", "--source-per-namespace=1", "--source-slow-after=5s", "--source-hang-after=20s",
		"--decofile-concurrency=12", "--source-concurrency=3"})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := o.Delivery.controllerOptions()
	if err != nil {
		t.Fatal(err)
	}
	if c.GitHub.APIURL != "http://127.0.0.1:1/api" || c.GitHub.ArchiveURL != "http://127.0.0.1:1/zip" || c.Encode.Threshold != 1000 ||
		c.GitHub.Limits.Files != 5 || c.Git.Limits.DecompressedBytes != 99 {
		t.Fatalf("controller options %+v", c)
	}
	if c.Git.Timeout != 7*time.Second || c.GitHub.Timeout != 7*time.Second || c.Git.Egress == nil || c.Git.Egress != c.GitHub.Egress {
		t.Fatalf("source timeout and URL policy not passed: %+v %+v", c.Git, c.GitHub)
	}
	if c.MaxConcurrentReconciles != 12 || c.MaxConcurrentRetrievals != 3 {
		t.Fatalf("concurrency not passed: %d workers, %d retrievals", c.MaxConcurrentReconciles, c.MaxConcurrentRetrievals)
	}
	// One gate for both kinds: a namespace's bound counts its git and GitHub retrievals together.
	// --source-hang-after above --source-timeout (7s): a retrieval cut off by the timeout is a hang.
	if g := c.Git.Gate; g == nil || g != c.GitHub.Gate || g.PerRemote != 3 || g.PerTenant != 1 || g.SlowAfter != 5*time.Second || g.HangAfter != 7*time.Second {
		t.Fatalf("retrieval bounds not passed, or not shared: %+v %+v", c.Git.Gate, c.GitHub.Gate)
	}
	if !c.Git.Egress.AllowsScheme("http") || c.Git.Egress.AllowsScheme("ssh") || c.Git.Egress.CheckAddr("git.internal", netip.MustParseAddr("127.0.0.1"), "80") != nil ||
		c.Git.Egress.CheckAddr("x", netip.MustParseAddr("192.168.1.1"), "80") != nil || c.Git.Egress.CheckAddr("x", netip.MustParseAddr("127.0.0.1"), "80") == nil {
		t.Fatal("URL policy flags not applied")
	}
	ctx := context.Background()
	if tok, from, _ := c.Tokens.Choose(ctx, "shop", "other", "shop", ""); tok != "from-env" || from != source.TokenFromFallback {
		t.Fatalf("granted repository: %q %q", tok, from)
	}
	if tok, _, _ := c.Tokens.Choose(ctx, "agency", "other", "shop", ""); tok != "" {
		t.Fatalf("fallback lent to a namespace without a grant: %q", tok)
	}
	if tok, _, _ := c.Tokens.Choose(ctx, "agency", "stranger", "x", ""); tok != "" {
		t.Fatalf("fallback lent to an org not listed: %q", tok)
	}
	if tok, _, _ := c.Tokens.Choose(ctx, "agency", "acme", "x", ""); tok != "from-env" {
		t.Fatalf("org/* grant: %q", tok)
	}
	for _, bad := range [][]string{{"--source-allowed-schemes=gopher"}, {"--source-allowed-hosts=a/b/c"}, {"--github-token-grants=noslash"}, {"--source-hang-after=-1s"}, {"--source-concurrency=-1"}} {
		var o2 Options
		fs2 := pflag.NewFlagSet("t", pflag.ContinueOnError)
		o2.BindFlags(fs2)
		if err := fs2.Parse(bad); err != nil {
			t.Fatal(err)
		}
		if err := o2.Validate(); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	var d Options
	d.BindFlags(pflag.NewFlagSet("d", pflag.ContinueOnError))
	dc, err := d.Delivery.controllerOptions()
	if err != nil || d.Delivery.SourceTimeout != source.DefaultTimeout || !dc.Git.Egress.AllowsScheme("https") || dc.Git.Egress.AllowsScheme("http") ||
		dc.Git.Gate.PerRemote != source.DefaultPerRemote || dc.Git.Gate.PerTenant != source.DefaultPerTenant || dc.Git.Gate.HangAfter != source.DefaultHangAfter ||
		dc.MaxConcurrentReconciles != controller.DefaultMaxConcurrentReconciles || dc.MaxConcurrentRetrievals != controller.DefaultMaxConcurrentRetrievals {
		t.Fatalf("defaults: %v %+v", err, d.Delivery)
	}

	o.Delivery.Limits.Files = -1
	if err := o.Validate(); err == nil {
		t.Fatal("a negative limit was accepted")
	}
}

// derivedContent is l with the content limit left to be derived from the memory limit.
func derivedContent(l source.Limits) source.Limits {
	l.DecompressedBytes = 0
	return l
}

// TestMemoryDefaultsFollowTheGoMemoryLimit: unset, the delivery memory is two fifths of the Go
// memory limit and the content limit a fifth of that (at most 64 MiB); set, both stay.
func TestMemoryDefaultsFollowTheGoMemoryLimit(t *testing.T) {
	chart := int64(512 << 20 * 9 / 10) // GOMEMLIMIT as the chart sets it
	d := DeliveryOptions{}.withMemoryDefaults(chart)
	if d.MemoryBytes != chart/5*2 || d.Limits.DecompressedBytes != d.MemoryBytes/2/5*2 {
		t.Fatalf("derived from %d: memory %d, content %d", chart, d.MemoryBytes, d.Limits.DecompressedBytes)
	}
	t.Logf("GOMEMLIMIT %d MiB: delivery memory %.1f MiB, content limit %.1f MiB", chart>>20, float64(d.MemoryBytes)/(1<<20), float64(d.Limits.DecompressedBytes)/(1<<20))
	if big := (DeliveryOptions{}).withMemoryDefaults(8 << 30); big.Limits.DecompressedBytes != source.DefaultLimits.DecompressedBytes {
		t.Fatalf("content limit for 8 GiB: %d, want at most 64 MiB", big.Limits.DecompressedBytes)
	}
	set := DeliveryOptions{MemoryBytes: 1 << 30, Limits: source.Limits{DecompressedBytes: 5 << 20}}.withMemoryDefaults(chart)
	if set.MemoryBytes != 1<<30 || set.Limits.DecompressedBytes != 5<<20 {
		t.Fatalf("explicit values changed: %+v", set)
	}
	if controller.ContentLimit(set.MemoryBytes) != 64<<20 {
		t.Fatalf("content limit of 1 GiB of delivery memory: %d", controller.ContentLimit(set.MemoryBytes))
	}
}
