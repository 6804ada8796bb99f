package cli

import (
	"context"
	goflag "flag"
	"fmt"
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
	dev.AddCommand(newDevUpCommand(), newDevDemoCommand(), newDevTenantCommand())
	return dev
}

func newDevUpCommand() *cobra.Command {
	o := devenv.Options{KubeconfigPath: ".siteops/kubeconfig", Manager: manager.DefaultOptions(), ImagesDir: devenv.DefaultImagesDir}
	zapOpts := zap.Options{}
	verbose := false
	nodeMode := "off"
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local control plane with the manager; Ctrl-C stops everything",
		Long: "Starts kube-apiserver and etcd from the build cache, installs the CRDs, starts Valkey with\n" +
			"Sentinels, Redis, S3 and a git remote, runs the manager in-process against them and writes an\n" +
			"admin kubeconfig. It prints progress lines, then a table of what runs where and one ready line.\n" +
			"Component logs go to files in the state folder (the table names them); -v streams them too.\n\n" +
			"With --node it also starts a real node (kubelet, containerd, runc; needs root and\n" +
			"`make node-tools`) with the images of --images imported (`make image`); the servers pods use\n" +
			"then listen on the node's address on this machine, which pods reach.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := chooseNode(&o, nodeMode, cmd.OutOrStdout()); err != nil {
				return err
			}
			logFile, err := devenv.OpenManagerLog(o)
			if err != nil {
				return err
			}
			defer logFile.Close()
			var logs io.Writer = logFile
			if verbose {
				o.Stream = cmd.ErrOrStderr()
				logs = io.MultiWriter(logFile, cmd.ErrOrStderr())
			}
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(logs)))
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			o.Out = cmd.OutOrStdout()
			return devenv.Up(ctx, o)
		},
	}
	cmd.Flags().StringVar(&o.KubeconfigPath, "kubeconfig", o.KubeconfigPath, "where to write the admin kubeconfig")
	cmd.Flags().StringVar(&o.StateDir, "state-dir", "", "folder for server data and logs (default: the kubeconfig's folder)")
	cmd.Flags().StringSliceVar(&o.Manager.Controllers, "controllers", o.Manager.Controllers, "parts to run")
	nodeFlag(cmd, &nodeMode, "also start a real node running the images of --images")
	imagesFlag(cmd, &o.ImagesDir)
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "stream every component's log to stderr as well as to its file")
	goFlags := goflag.NewFlagSet("log", goflag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	cmd.Flags().AddGoFlagSet(goFlags)
	return cmd
}

func newDevDemoCommand() *cobra.Command {
	o := devenv.Options{KubeconfigPath: ".siteops/demo/kubeconfig", Manager: manager.DefaultOptions(), ImagesDir: devenv.DefaultImagesDir}
	examples := "examples/homelab"
	nodeMode := "auto"
	zapOpts := zap.Options{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Bring up the local environment and show every part working, then tear it down",
		Long: "Runs every part of siteops against a local environment and prints a summary. With a real\n" +
			"node (--node=auto uses one when running as root with `make node-tools` and `make image` done)\n" +
			"the site pods are real pods of the site-runtime image; without, they are local site-runtime\n" +
			"processes registered as Pods.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := chooseNode(&o, nodeMode, cmd.OutOrStdout()); err != nil {
				return err
			}
			logFile, err := devenv.OpenManagerLog(o)
			if err != nil {
				return err
			}
			defer logFile.Close()
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(logFile)))
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			steps, cleanup := demo.Steps(runInProcess, examples)
			defer cleanup()
			return demo.Run(ctx, o, steps, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&o.KubeconfigPath, "kubeconfig", o.KubeconfigPath, "where to write the admin kubeconfig while the demo runs")
	cmd.Flags().StringVar(&examples, "examples", examples, "sample repository for the wave planner step")
	nodeFlag(cmd, &nodeMode, "run the site pods on a real node")
	imagesFlag(cmd, &o.ImagesDir)
	goFlags := goflag.NewFlagSet("log", goflag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	cmd.Flags().AddGoFlagSet(goFlags)
	return cmd
}

// nodeFlag binds --node, the same on dev up and dev demo: auto, on or off; --node alone is on.
func nodeFlag(cmd *cobra.Command, mode *string, what string) {
	cmd.Flags().StringVar(mode, "node", *mode, what+": on (needs root and make node-tools), off, or auto (on when "+
		"running as root with the node tools and images built); --node alone is on")
	cmd.Flags().Lookup("node").NoOptDefVal = "on"
}

// imagesFlag binds --images, the folder of image archives the node imports.
func imagesFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "images", *dir, "folder of image archives (from make image) the node imports")
}

// chooseNode sets o.Node from --node; auto says on out why it runs without a node.
func chooseNode(o *devenv.Options, mode string, out io.Writer) error {
	switch mode {
	case "on":
		o.Node = true
	case "off":
		o.Node = false
	case "auto":
		if err := devenv.CheckNode(o.ImagesDir); err != nil {
			fmt.Fprintf(out, "siteops: running without a real node: %v\n", err)
		} else {
			o.Node = true
		}
	default:
		return fmt.Errorf("--node %q: want auto, on or off", mode)
	}
	return nil
}

// runInProcess runs a siteops command line in this process, as the demo's steps do.
func runInProcess(ctx context.Context, out io.Writer, args ...string) error {
	root := NewRootCommand()
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(out)
	return root.ExecuteContext(ctx)
}
