package cli

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/siteops/siteops/internal/mirror/verify"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/ui"
	"github.com/siteops/siteops/internal/waves/diagram"
	"github.com/siteops/siteops/internal/waves/plan"
	"github.com/siteops/siteops/internal/waves/repo"
)

// wavesOf plans the waves of the repository at dir, with the planner's default layout, each time
// the page asks: the page follows edits to the checkout.
func wavesOf(dir string) func(context.Context) (*diagram.Graph, error) {
	return func(context.Context) (*diagram.Graph, error) {
		f := repoFlags{dir: dir, apps: repo.DefaultLayout.Apps, clusters: repo.DefaultLayout.Clusters, prefix: plan.DefaultOptions.Prefix, root: plan.DefaultOptions.Root}
		s, err := f.load()
		if err != nil {
			return nil, err
		}
		return diagram.New(s.Catalog, s.Waves, s.Plan), nil
	}
}

// newUICommand builds `siteops ui`.
func newUICommand() *cobra.Command {
	var k kubeFlags
	var address, wavesRepo string
	var check verifyOptions
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
			o := ui.LocalOptions{Address: address, Namespace: ns, Scheme: scheme.New(),
				Out: cmd.OutOrStdout(), Log: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))}
			if wavesRepo != "" {
				o.Waves = wavesOf(wavesRepo)
			}
			switch {
			case check.repo != "" && check.auditLog != "":
				o.Verify = func(context.Context) (*verify.Report, error) { return verifyAttribution(check) }
			case check.repo != "" || check.auditLog != "":
				return errors.New("--verify-repo and --audit-log go together")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return ui.RunLocal(ctx, cfg, o)
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1:0", "address to listen on (a free loopback port by default)")
	cmd.Flags().StringVar(&check.repo, "verify-repo", "", "the mirror's git repository (a local path or a URL readable without prompting): the Mirror page checks its authors against --audit-log, as siteops mirror verify does, on every visit")
	cmd.Flags().StringVar(&check.auditLog, "audit-log", "", "the API server's audit log file (--audit-log-path, JSON lines), for --verify-repo")
	cmd.Flags().StringVar(&check.since, "verify-since", "24h", "check only commits and audit events from this time: RFC 3339 or an age")
	cmd.Flags().StringVar(&check.ref, "verify-ref", "", "branch or revision of --verify-repo to read (default HEAD)")
	cmd.Flags().StringVar(&wavesRepo, "waves-repo", "", "repository whose catalog the Waves page plans (read again on every visit), laid out as siteops waves expects")
	k.bind(cmd.Flags(), "namespace shown when you may not list every namespace (default: the context's namespace)")
	return cmd
}
