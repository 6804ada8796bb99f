// Command siteops-manager runs the siteops operator: Decofile delivery, tenant cache isolation
// and the cluster-to-git mirror, as chosen with --controllers.
package main

import (
	"errors"
	goflag "flag"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/version"
)

func main() {
	opts := manager.DefaultOptions()
	fs := pflag.NewFlagSet("siteops-manager", pflag.ContinueOnError)
	opts.BindFlags(fs)
	zapOpts := zap.Options{}
	goFlags := goflag.NewFlagSet("log", goflag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	fs.AddGoFlagSet(goFlags)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println(version.Version, version.Commit())
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "siteops-manager: find the cluster:", err)
		os.Exit(1)
	}
	if err := manager.Run(ctrl.SetupSignalHandler(), cfg, opts); err != nil {
		fmt.Fprintln(os.Stderr, "siteops-manager:", err)
		os.Exit(1)
	}
}
