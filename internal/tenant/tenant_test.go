package tenant

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func parse(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	o := &Options{}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.Validate()
}

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv(EnvAdminPassword, "from-env")
	t.Setenv(EnvResyncPeriod, "90s")
	o, err := parse(t, "--valkey-sentinel-addrs=127.0.0.1:26379,127.0.0.1:26380")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := o.NodeConfig(); err != nil || cfg.Password != "from-env" {
		t.Fatalf("admin password from %s: %q, %v", EnvAdminPassword, cfg.Password, err)
	}
	if o.ResyncPeriod != 90*time.Second || o.SentinelMaster != "mymaster" ||
		len(o.SentinelAddrs) != 2 || o.DeleteTimeout != DefaultDeleteTimeout {
		t.Fatalf("options %+v", o)
	}
	o, err = parse(t, "--valkey-url=redis://127.0.0.1:6379", "--valkey-admin-password=flag", "--valkey-acl-resync-period=5m")
	cfg, _ := o.NodeConfig()
	if err != nil || cfg.Password != "flag" || o.ResyncPeriod != 5*time.Minute {
		t.Fatalf("flags must win over the environment: %+v %v", o, err)
	}
}

func TestInvalidResyncPeriodIsAStartupError(t *testing.T) {
	t.Setenv(EnvResyncPeriod, "ten minutes")
	_, err := parse(t, "--valkey-url=redis://127.0.0.1:6379")
	if err == nil || !strings.Contains(err.Error(), EnvResyncPeriod) {
		t.Fatalf("Validate() = %v, want an error naming %s", err, EnvResyncPeriod)
	}
	t.Setenv(EnvResyncPeriod, "")
	if _, err := parse(t, "--valkey-url=redis://127.0.0.1:6379", "--valkey-acl-resync-period=0s"); err == nil {
		t.Fatal("a zero period was accepted")
	}
	if _, err := parse(t, "--valkey-url=redis://127.0.0.1:6379", "--valkey-acl-resync-period=soon"); err == nil {
		t.Fatal("an unparsable flag was accepted")
	}
}

func TestValidateNeedsOneWayToValkey(t *testing.T) {
	if _, err := parse(t); err == nil || !strings.Contains(err.Error(), "--valkey-sentinel-addrs") {
		t.Fatalf("no address: %v", err)
	}
	if _, err := parse(t, "--valkey-url=redis://x:1", "--valkey-sentinel-addrs=a:1"); err == nil {
		t.Fatal("both a URL and Sentinels were accepted")
	}
	if _, err := parse(t, "--valkey-url=redis://x:1", "--valkey-tls-ca-file=/ca.pem"); err == nil {
		t.Fatal("a CA file without TLS was accepted")
	}
	o, err := parse(t, "--valkey-url=redis://x:1", "--valkey-tls", "--valkey-tls-ca-file=/does/not/exist")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.NodeConfig(); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
}

func TestAdminPasswordNeverShowsInHelp(t *testing.T) {
	t.Setenv(EnvAdminPassword, "s3cret-from-env")
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	var o Options
	o.BindFlags(fs)
	if usage := fs.FlagUsages(); strings.Contains(usage, "s3cret-from-env") {
		t.Fatalf("--help shows the admin password from the environment:\n%s", usage)
	}
}

func TestReservedUsersAlwaysKeepDefaultLockAndAdmin(t *testing.T) {
	o, err := parse(t, "--valkey-url=redis://x:1", "--valkey-admin-username=operator")
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Reserved(); !slices.Equal(got, []string{"default", "lock", "operator"}) {
		t.Fatalf("default reserved users %v", got)
	}
	o, err = parse(t, "--valkey-url=redis://x:1", "--valkey-acl-reserved-users=replicator,sentinel")
	if err != nil {
		t.Fatal(err)
	}
	got := o.Reserved()
	for _, u := range []string{"replicator", "sentinel", "default", "lock"} {
		if !slices.Contains(got, u) {
			t.Errorf("%s not reserved with the flag set: %v", u, got)
		}
	}
}
