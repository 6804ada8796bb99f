package manager

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

// The certificate rotator patches only the configurations of webhooks that are served: the chart
// creates, and grants the rotator, no others, so asking for one more would fail the start.
func TestServedWebhookConfigsFollowTheFlags(t *testing.T) {
	cases := []struct {
		args                 []string
		mutating, validating []string
	}{
		{nil, []string{"siteops-decofile-inject"},
			[]string{"siteops-decofile-protect", "siteops-mirror-commitrequest", "siteops-mirror-watchrule"}},
		{[]string{"--commitrequest-webhook=false"}, []string{"siteops-decofile-inject"},
			[]string{"siteops-decofile-protect", "siteops-mirror-watchrule"}},
		{[]string{"--watchrule-webhook=false", "--controllers=mirror"}, nil, []string{"siteops-mirror-commitrequest"}},
		{[]string{"--controllers=tenant"}, nil, nil},
		{[]string{"--decofile-disable-injection", "--controllers=decofile"}, nil, nil},
	}
	for _, tc := range cases {
		o := DefaultOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.BindFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		m, v := o.servedWebhookConfigs()
		if !slices.Equal(m, tc.mutating) || !slices.Equal(v, tc.validating) {
			t.Errorf("%v: mutating %v, validating %v; want %v and %v", tc.args, m, v, tc.mutating, tc.validating)
		}
	}
}
