// Package decofile wires the Decofile delivery part into the manager: the controller that turns a
// Decofile into a ConfigMap or S3 object, the injection webhook, and the rollout to running pods.
package decofile

import (
	"fmt"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/siteops/siteops/internal/decofile/inject"
)

// Options configures the Decofile part.
type Options struct {
	// Inject configures the injection webhook; the S3 part fills Inject.S3.
	Inject inject.Options
	// DisableInjection leaves the injection webhooks unregistered (e.g. when another replica
	// set serves them).
	DisableInjection bool
}

// BindFlags registers the part's flags.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.DisableInjection, "decofile-disable-injection", o.DisableInjection, "do not serve the Decofile injection and delete-protection webhooks")
}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error { return nil }

// Setup registers the part's controllers and webhooks with mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	if !o.DisableInjection {
		if err := inject.Setup(mgr, o.Inject); err != nil {
			return fmt.Errorf("set up Decofile injection webhook: %w", err)
		}
	}
	return nil
}
