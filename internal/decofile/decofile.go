// Package decofile wires the Decofile delivery part into the manager: the controller that turns a
// Decofile into a ConfigMap or S3 object, the injection webhook, and the rollout to running pods.
package decofile

import (
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Options configures the Decofile part.
type Options struct{}

// BindFlags registers the part's flags.
func (o *Options) BindFlags(fs *pflag.FlagSet) {}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error { return nil }

// Setup registers the part's controllers and webhooks with mgr.
func Setup(mgr ctrl.Manager, o Options) error { return nil }
