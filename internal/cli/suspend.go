package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/inspect"
)

func newSuspendCommand() *cobra.Command { return newSuspendResumeCommand(true) }

func newResumeCommand() *cobra.Command { return newSuspendResumeCommand(false) }

// suspendable returns an empty object of a kind that has spec.suspend, or nil for other kinds.
func suspendable(kind string) client.Object {
	switch kind {
	case inspect.KindDecofile:
		return &decov1.Decofile{}
	case inspect.KindGitTarget:
		return &mirrorv1.GitTarget{}
	case inspect.KindWatchRule:
		return &mirrorv1.WatchRule{}
	}
	return nil
}

// newSuspendResumeCommand builds `siteops suspend` (suspend) or `siteops resume`.
func newSuspendResumeCommand(suspend bool) *cobra.Command {
	var k kubeFlags
	use, done := "resume", "resumed"
	short := "Resume a suspended Decofile, GitTarget or WatchRule: delivery or mirroring goes on from where it stopped"
	if suspend {
		use, done = "suspend", "suspended"
		short = "Suspend a Decofile (nothing is read, stored or notified), GitTarget (nothing is committed) or WatchRule (its watches stop) until it is resumed"
	}
	cmd := &cobra.Command{
		Use:     use + " KIND/NAME...",
		Short:   short,
		Example: fmt.Sprintf("  siteops %s decofile/shop -n sites-shop\n  siteops %s gittarget/audit watchrule/config -n sites-shop", use, use),
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			type target struct {
				kind, name string
				object     client.Object
			}
			var targets []target
			for _, a := range args {
				kind, name, ok := strings.Cut(a, "/")
				ks, err := kindsNamed(kind)
				if !ok || name == "" || err != nil || len(ks) != 1 || suspendable(ks[0].kind) == nil {
					return fmt.Errorf("%q: want decofile/NAME, gittarget/NAME or watchrule/NAME", a)
				}
				targets = append(targets, target{strings.ToLower(ks[0].kind), name, suspendable(ks[0].kind)})
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			patch := fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend)
			if !suspend {
				patch = `{"spec":{"suspend":null}}`
			}
			for _, t := range targets {
				t.object.SetNamespace(ns)
				t.object.SetName(t.name)
				if err := c.Patch(cmd.Context(), t.object, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
					return fmt.Errorf("%s %s %s/%s: %w", use, t.kind, ns, t.name, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s/%s %s\n", t.kind, t.name, done)
			}
			return nil
		},
	}
	k.bind(cmd.Flags(), "namespace of the objects (default: the context's namespace)")
	return cmd
}
