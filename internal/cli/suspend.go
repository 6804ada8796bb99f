package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/inspect"
)

func newSuspendCommand() *cobra.Command { return newSuspendResumeCommand(true) }

func newResumeCommand() *cobra.Command { return newSuspendResumeCommand(false) }

// newSuspendResumeCommand builds `siteops suspend` (suspend) or `siteops resume`.
func newSuspendResumeCommand(suspend bool) *cobra.Command {
	var k kubeFlags
	use, short, done := "resume", "Resume the delivery of a suspended Decofile: its source is read and its pods notified again", "resumed"
	if suspend {
		use, short, done = "suspend", "Suspend the delivery of a Decofile: nothing is read, stored or notified until it is resumed", "suspended"
	}
	cmd := &cobra.Command{
		Use:     use + " decofile/NAME...",
		Short:   short,
		Example: fmt.Sprintf("  siteops %s decofile/shop -n sites-shop", use),
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var names []string
			for _, a := range args {
				kind, name, ok := strings.Cut(a, "/")
				ks, err := kindsNamed(kind)
				if !ok || name == "" || err != nil || len(ks) != 1 || ks[0].kind != inspect.KindDecofile {
					return fmt.Errorf("%q: want decofile/NAME", a)
				}
				names = append(names, name)
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			for _, name := range names {
				d := &decov1.Decofile{}
				d.Namespace, d.Name = ns, name
				patch := fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend)
				if !suspend {
					patch = `{"spec":{"suspend":null}}`
				}
				if err := c.Patch(cmd.Context(), d, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
					return fmt.Errorf("%s Decofile %s/%s: %w", use, ns, name, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "decofile/%s %s\n", name, done)
			}
			return nil
		},
	}
	k.bind(cmd.Flags(), "namespace of the Decofiles (default: the context's namespace)")
	return cmd
}
