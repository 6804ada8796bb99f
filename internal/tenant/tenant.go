// Package tenant wires tenant cache isolation into the manager: per-namespace Valkey/Redis ACL
// users on the master and every replica, kept in sync across Sentinel failover.
package tenant

import (
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Options configures the tenant part.
type Options struct{}

// BindFlags registers the part's flags.
func (o *Options) BindFlags(fs *pflag.FlagSet) {}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error { return nil }

// Setup registers the part's controllers and webhooks with mgr.
func Setup(mgr ctrl.Manager, o Options) error { return nil }
