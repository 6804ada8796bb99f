package cli

import (
	"context"
	goflag "flag"
	"io"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/siteops/siteops/internal/demo"
	"github.com/siteops/siteops/internal/devenv"
	"github.com/siteops/siteops/internal/manager"
)

func newDevCommand() *cobra.Command {
	dev := &cobra.Command{Use: "dev", Short: "Run siteops locally, without a cluster"}
	dev.AddCommand(newDevUpCommand(), newDevDemoCommand())
	return dev
}

func newDevUpCommand() *cobra.Command {
	o := devenv.Options{KubeconfigPath: ".siteops/kubeconfig", Manager: manager.DefaultOptions()}
	zapOpts := zap.Options{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local control plane with the manager; Ctrl-C stops everything",
		Long: "Starts kube-apiserver and etcd from the build cache, installs the CRDs, runs the manager " +
			"in-process against them and writes an admin kubeconfig. Prints one ready line when usable.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(cmd.ErrOrStderr())))
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			o.Out = cmd.OutOrStdout()
			return devenv.Up(ctx, o)
		},
	}
	cmd.Flags().StringVar(&o.KubeconfigPath, "kubeconfig", o.KubeconfigPath, "where to write the admin kubeconfig")
	cmd.Flags().StringVar(&o.StateDir, "state-dir", "", "folder for server data and logs (default: the kubeconfig's folder)")
	cmd.Flags().StringSliceVar(&o.Manager.Controllers, "controllers", o.Manager.Controllers, "parts to run")
	goFlags := goflag.NewFlagSet("log", goflag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	cmd.Flags().AddGoFlagSet(goFlags)
	return cmd
}

func newDevDemoCommand() *cobra.Command {
	o := devenv.Options{KubeconfigPath: ".siteops/demo/kubeconfig", Manager: manager.DefaultOptions()}
	examples := "examples/homelab"
	zapOpts := zap.Options{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Bring up the local environment and show every part working, then tear it down",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(io.Discard)))
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			steps, cleanup := demo.Steps(runInProcess, examples)
			defer cleanup()
			return demo.Run(ctx, o, steps, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&o.KubeconfigPath, "kubeconfig", o.KubeconfigPath, "where to write the admin kubeconfig while the demo runs")
	cmd.Flags().StringVar(&examples, "examples", examples, "sample repository for the wave planner step")
	goFlags := goflag.NewFlagSet("log", goflag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	cmd.Flags().AddGoFlagSet(goFlags)
	return cmd
}

// runInProcess runs a siteops command line in this process, as the demo's steps do.
func runInProcess(ctx context.Context, out io.Writer, args ...string) error {
	root := NewRootCommand()
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(out)
	return root.ExecuteContext(ctx)
}
