package decofile

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestLegacyEnvironment: v0.11's DECOFILE_S3_* variables fill the --s3-* defaults when the
// siteops S3_* names are unset (the siteops names win), ENABLE_WEBHOOKS=false turns the
// injection webhooks off exactly as v0.11 reads it, and each name in use gets one deprecation line.
func TestLegacyEnvironment(t *testing.T) {
	t.Setenv("DECOFILE_S3_BUCKET", "legacy-bucket")
	t.Setenv("DECOFILE_S3_REGION", "sa-east-1")
	t.Setenv("DECOFILE_S3_PREFIX", "decofiles")
	t.Setenv("DECOFILE_S3_PUBLIC_HOST", "cdn.example.com")
	t.Setenv("S3_PREFIX", "siteops-wins")
	t.Setenv(EnvLegacyEnableWebhooks, "false")
	var o Options
	o.BindFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
	if s := o.S3; s.Bucket != "legacy-bucket" || s.Region != "sa-east-1" || s.Prefix != "siteops-wins" || s.PublicHost != "cdn.example.com" {
		t.Fatalf("S3 from v0.11 environment: %+v", s)
	}
	if !o.DisableInjection {
		t.Fatal("ENABLE_WEBHOOKS=false left the injection webhooks on")
	}
	if d := o.Deprecations(); len(d) != 5 || !strings.Contains(strings.Join(d, "\n"), "DECOFILE_S3_BUCKET (published Decofile operator v0.11) is deprecated: use S3_BUCKET") {
		t.Fatalf("deprecations = %q", d)
	}
	// v0.11 disables its webhooks only for the literal "false".
	for _, v := range []string{"true", "0", ""} {
		t.Setenv(EnvLegacyEnableWebhooks, v)
		var o Options
		o.BindFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
		if o.DisableInjection {
			t.Errorf("ENABLE_WEBHOOKS=%q turned the injection webhooks off", v)
		}
	}
}
