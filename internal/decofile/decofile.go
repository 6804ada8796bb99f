// Package decofile wires the Decofile delivery part into the manager: the controller that turns a
// Decofile into a ConfigMap or S3 object, the injection webhook, and the rollout to running pods.
package decofile

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/decofile/rollout"
)

// Options configures the Decofile part.
type Options struct {
	// Inject configures the injection webhook; the S3 part fills Inject.S3.
	Inject inject.Options
	// DisableInjection leaves the injection webhooks unregistered (e.g. when another replica
	// set serves them).
	DisableInjection bool
	// Rollout configures the notification of running pods (--notify-*, --reload-protocol).
	Rollout rollout.Options
}

// BindFlags registers the part's flags.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.DisableInjection, "decofile-disable-injection", o.DisableInjection, "do not serve the Decofile injection and delete-protection webhooks")
	o.bindRolloutFlags(fs)
}

// bindRolloutFlags registers the pod notification flags, defaulting unset values to the seed's
// notification strategy (30 pods at once, 2.5 min per pod, 2 attempts, 5 min per rollout).
func (o *Options) bindRolloutFlags(fs *pflag.FlagSet) {
	n := &o.Rollout.Notify
	fs.IntVar(&n.Concurrency, "notify-concurrency", orDefault(n.Concurrency, notify.DefaultConcurrency), "pods notified at the same time during a Decofile rollout")
	fs.DurationVar(&n.PodTimeout, "notify-pod-timeout", orDefault(n.PodTimeout, notify.DefaultPodTimeout), "time one notification attempt on one pod may take")
	fs.IntVar(&n.Attempts, "notify-attempts", orDefault(n.Attempts, notify.DefaultAttempts), "attempts per pod (unreachable pods and 5xx answers are retried with backoff)")
	fs.DurationVar(&n.Timeout, "notify-timeout", orDefault(n.Timeout, notify.DefaultTimeout), "time a whole rollout may take; pods not confirmed by then fail it")
	if o.Rollout.Protocol == "" {
		o.Rollout.Protocol = notify.ProtocolPush
	}
	fs.StringVar((*string)(&o.Rollout.Protocol), "reload-protocol", string(o.Rollout.Protocol), "how pods are told about new content: push (POST the Decofile) or long-poll (GET until timestamp.txt is updated)")
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.Rollout.Protocol != "" {
		if _, err := notify.ParseProtocol(string(o.Rollout.Protocol)); err != nil {
			errs = append(errs, fmt.Errorf("--reload-protocol: %w", err))
		}
	}
	n := o.Rollout.Notify
	if n.Concurrency < 0 || n.Attempts < 0 || n.PodTimeout < 0 || n.Timeout < 0 {
		errs = append(errs, errors.New("--notify-concurrency, --notify-attempts, --notify-pod-timeout and --notify-timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Setup registers the part's controllers and webhooks with mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	if !o.DisableInjection {
		if err := inject.Setup(mgr, o.Inject); err != nil {
			return fmt.Errorf("set up Decofile injection webhook: %w", err)
		}
	}
	if err := rollout.Setup(mgr, o.Rollout); err != nil {
		return fmt.Errorf("set up Decofile rollout controller: %w", err)
	}
	return nil
}
