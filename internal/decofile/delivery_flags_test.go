package decofile

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/source"
)

func TestDeliveryFlags(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	o.BindFlags(fs)
	if o.Delivery.GitHubAPIURL != source.DefaultGitHubAPIURL || o.Delivery.CompressionThreshold != encode.DefaultThreshold || o.Delivery.Limits != source.DefaultLimits {
		t.Fatalf("defaults %+v", o.Delivery)
	}
	t.Setenv("GITHUB_TOKEN", "from-env")
	err := fs.Parse([]string{"--github-api-url=http://127.0.0.1:1/api", "--github-archive-url=http://127.0.0.1:1/zip",
		"--github-token-orgs=acme,Other", "--compression-threshold=1000", "--decofile-max-files=5", "--decofile-max-content-bytes=99"})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	c := o.Delivery.controllerOptions()
	if c.GitHub.APIURL != "http://127.0.0.1:1/api" || c.GitHub.ArchiveURL != "http://127.0.0.1:1/zip" || c.Encode.Threshold != 1000 ||
		c.GitHub.Limits.Files != 5 || c.Git.Limits.DecompressedBytes != 99 {
		t.Fatalf("controller options %+v", c)
	}
	if tok, from := c.Tokens.Choose("other", ""); tok != "from-env" || from != source.TokenFromFallback {
		t.Fatalf("allowed org: %q %q", tok, from)
	}
	if tok, _ := c.Tokens.Choose("stranger", ""); tok != "" {
		t.Fatalf("fallback lent to an org not listed: %q", tok)
	}

	o.Delivery.Limits.Files = -1
	if err := o.Validate(); err == nil {
		t.Fatal("a negative limit was accepted")
	}
}
