// Package mirror wires the cluster-to-git mirror into the manager: watched resources committed to
// git as clean YAML, authored by whoever made each change.
package mirror

import (
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Options configures the mirror part.
type Options struct{}

// BindFlags registers the part's flags.
func (o *Options) BindFlags(fs *pflag.FlagSet) {}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error { return nil }

// Setup registers the part's controllers and webhooks with mgr.
func Setup(mgr ctrl.Manager, o Options) error { return nil }
