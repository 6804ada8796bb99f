package mirror

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/siteops/siteops/internal/mirror/gitwriter"
)

func parse(t *testing.T, args ...string) *Options {
	t.Helper()
	o := &Options{}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestOptionsFlags(t *testing.T) {
	t.Setenv("REDIS_PASSWORD", "from-env")
	o := parse(t, "--redis-addr=r:6379", "--redis-username=u", "--redis-db=3", "--redis-tls", "--redis-key-prefix=cell:a:", "--commitrequest-webhook-client-ca=/ca.pem")
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg := o.storeConfig()
	if cfg.Addr != "r:6379" || cfg.Username != "u" || cfg.DB != 3 || !cfg.TLSEnabled || cfg.KeyPrefix != "cell:a:" || cfg.AuthValue != "from-env" {
		t.Fatalf("store config = %+v", cfg)
	}
	if o := parse(t, "--redis-password=flag"); o.storeConfig().AuthValue != "flag" {
		t.Fatal("--redis-password does not win over $REDIS_PASSWORD")
	}
	fs := pflag.NewFlagSet("help", pflag.ContinueOnError)
	(&Options{}).BindFlags(fs)
	if strings.Contains(fs.FlagUsages(), "from-env") {
		t.Fatal("the password from the environment shows in --help")
	}
	if o := parse(t); o.RedisKeyPrefix != "siteops" || o.Validate() != nil {
		t.Fatalf("defaults: %+v %v", o, o.Validate())
	}
	if err := (&Options{}).Validate(); err != nil {
		t.Fatalf("zero Options (no flags bound) must be valid: %v", err)
	}
}

// TestCommitRequestWebhookNeedsClientCA: the CommitRequest webhook is served (on, with Redis)
// only with a client CA, and then the webhook server asks callers for certificates.
func TestCommitRequestWebhookNeedsClientCA(t *testing.T) {
	err := parse(t, "--redis-addr=r:6379").Validate()
	if err == nil || !strings.Contains(err.Error(), "--commitrequest-webhook-client-ca") {
		t.Fatalf("served without a client CA: %v", err)
	}
	for _, args := range [][]string{
		{"--redis-addr=r:6379", "--commitrequest-webhook=false"},
		{}, // no Redis: the webhook is not served
	} {
		o := parse(t, args...)
		if err := o.Validate(); err != nil || o.WebhookTLSOpts() != nil {
			t.Errorf("%v: %v, TLS options %d", args, err, len(o.WebhookTLSOpts()))
		}
	}
	o := parse(t, "--redis-addr=r:6379", "--commitrequest-webhook-client-ca=/ca.pem")
	if err := o.Validate(); err != nil || len(o.WebhookTLSOpts()) != 1 {
		t.Fatalf("with a client CA: %v, TLS options %d", err, len(o.WebhookTLSOpts()))
	}
}

func TestOptionsRejectBadPrefixes(t *testing.T) {
	for _, args := range [][]string{{"--redis-key-prefix="}, {"--redis-key-prefix=a*"}, {"--redis-key-prefix=a%b"}, {"--redis-db=-1"}} {
		if err := parse(t, args...).Validate(); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestOptionsGitEgress: the mirror's URL policy defaults to https and ssh to public addresses,
// takes an internal git host, and refuses entries it cannot read.
func TestOptionsGitEgress(t *testing.T) {
	o := parse(t)
	p, err := o.egressPolicy()
	if err != nil || !p.AllowsScheme("https") || !p.AllowsScheme("ssh") || p.AllowsScheme("http") {
		t.Fatalf("default schemes: %v %v", o.GitAllowedSchemes, err)
	}
	o = parse(t, "--git-allowed-schemes=https,http", "--git-allowed-hosts=git.internal,10.20.0.0/16", "--git-allow-private-networks")
	if p, err = o.egressPolicy(); err != nil || !p.AllowsScheme("http") || p.AllowsScheme("ssh") || !o.GitAllowPrivateNetworks {
		t.Fatalf("policy from flags: %+v %v", o, err)
	}
	for _, args := range [][]string{{"--git-allowed-schemes=gopher"}, {"--git-allowed-hosts=a/b"}} {
		if err := parse(t, args...).Validate(); err == nil || !strings.Contains(err.Error(), "--git-allowed") {
			t.Errorf("%v accepted or not named: %v", args, err)
		}
	}
}

func TestOptionsGitFetchBounds(t *testing.T) {
	if o := parse(t); o.GitMaxFetchBytes != gitwriter.DefaultMaxFetchBytes || o.GitMaxFetchObjectBytes != gitwriter.DefaultMaxFetchObjectBytes {
		t.Fatalf("defaults: %d, %d", o.GitMaxFetchBytes, o.GitMaxFetchObjectBytes)
	}
	o := parse(t, "--git-max-fetch-bytes=1048576", "--git-max-fetch-object-bytes=4194304")
	if o.GitMaxFetchBytes != 1<<20 || o.GitMaxFetchObjectBytes != 4<<20 || o.Validate() != nil {
		t.Fatalf("set: %d, %d, %v", o.GitMaxFetchBytes, o.GitMaxFetchObjectBytes, o.Validate())
	}
	if err := parse(t, "--git-max-fetch-bytes=-1").Validate(); err == nil || !strings.Contains(err.Error(), "--git-max-fetch-bytes") {
		t.Fatalf("a negative bound: %v", err)
	}
}
