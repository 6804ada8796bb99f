package decofile

import (
	"testing"

	"github.com/spf13/pflag"
)

// TestS3Flags: the --s3-* flags reach Options.S3 and bad combinations fail Validate.
func TestS3Flags(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	o.BindFlags(fs)
	if o.S3.Enabled() {
		t.Fatalf("s3 target on without --s3-bucket: %+v", o.S3)
	}
	err := fs.Parse([]string{"--s3-bucket=decofiles", "--s3-region=eu-west-1", "--s3-endpoint=http://127.0.0.1:9000",
		"--s3-path-style", "--s3-prefix=sites", "--s3-public-host=cdn.example.com", "--s3-delete-on-finalize"})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	s := o.S3
	if s.Bucket != "decofiles" || s.Region != "eu-west-1" || s.Endpoint != "http://127.0.0.1:9000" || !s.PathStyle || s.Prefix != "sites" ||
		s.PublicHost != "cdn.example.com" || !s.DeleteOnFinalize {
		t.Fatalf("parsed %+v", s)
	}
	o.S3.Endpoint = "not a url"
	if err := o.Validate(); err == nil {
		t.Fatal("a bad --s3-endpoint was accepted")
	}
}
