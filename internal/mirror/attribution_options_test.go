package mirror

import (
	"strings"
	"testing"
	"time"
)

func TestAttributionFlags(t *testing.T) {
	o := parse(t)
	if o.Attribution.Enabled || o.Attribution.Grace != 3*time.Second || o.Attribution.FactTTL != 10*time.Minute {
		t.Fatalf("attribution defaults = %+v", o.Attribution)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("attribution off rejected: %v", err)
	}
	o = parse(t, "--author-attribution", "--author-attribution-grace=2s", "--author-attribution-ttl=1m")
	err := o.Validate()
	for _, want := range []string{"--redis-addr", "--audit-client-ca", "--audit-cert-dir"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want a complaint about %s", err, want)
		}
	}
	o = parse(t, "--author-attribution", "--redis-addr=127.0.0.1:6379", "--audit-client-ca=/ca.pem", "--audit-cert-dir=/certs", "--author-attribution-route=prod", "--commitrequest-webhook-client-ca=/ca.pem")
	if err := o.Validate(); err != nil {
		t.Fatalf("complete attribution flags rejected: %v", err)
	}
	if o.Attribution.Route != "prod" || o.Attribution.ClientCAFile != "/ca.pem" {
		t.Fatalf("parsed = %+v", o.Attribution)
	}
}
