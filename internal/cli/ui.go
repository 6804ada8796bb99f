package cli

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/ui"
)

// newUICommand builds `siteops ui`.
func newUICommand() *cobra.Command {
	var k kubeFlags
	var address string
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the siteops web UI on this machine, as the kubeconfig's user: it shows what your rights show and acts as you",
		Long: `Serve the siteops web UI on this machine, as the kubeconfig's user.

Every read and every action goes to the API server with your credentials, so the pages show
exactly what your Kubernetes rights show. The command prints the address to open, with a
one-time token that signs the browser in; it opens nothing by itself. Stop it with Ctrl-C.`,
		Example: "  siteops ui\n  siteops ui --address 127.0.0.1:8090 -n sites-shop",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, ns, err := k.restConfig()
			if err != nil {
				return err
			}
			return ui.RunLocal(cmd.Context(), cfg, ui.LocalOptions{Address: address, Namespace: ns, Scheme: scheme.New(),
				Out: cmd.OutOrStdout(), Log: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))})
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1:0", "address to listen on (a free loopback port by default)")
	k.bind(cmd.Flags(), "namespace shown when you may not list every namespace (default: the context's namespace)")
	return cmd
}
