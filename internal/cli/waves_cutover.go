package cli

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/siteops/siteops/internal/waves/cutover"
	"github.com/siteops/siteops/internal/waves/liveread"
	"github.com/siteops/siteops/internal/waves/repo"
)

type cutoverFlags struct {
	base                    string
	live                    bool
	kubeconfig, kubeContext string
	fluxNamespace, env      string
}

func newWavesCutoverCommand() *cobra.Command {
	var f repoFlags
	var o cutoverFlags
	cmd := &cobra.Command{
		Use:   "cutover-check --repo DIR (--base REF | --live [--kubeconfig FILE])",
		Short: "Check that moving resources between Kustomizations cannot prune them, and print the safe sequence",
		Long: "Follow every app resource from its owner now to its owner in the working tree and report each move that\n" +
			"Flux would turn into a delete. --base compares with a git ref. --live reads the app-tier Flux\n" +
			"Kustomizations from the cluster instead: spec.prune, spec.suspend, spec.deletionPolicy, status.inventory\n" +
			"(what each one really owns) and the live objects' prune annotations; add --base to also list where the\n" +
			"cluster differs from git. Exits non-zero on any unmitigated hazard.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.base == "" && !o.live {
				return errors.New("--base is required (the git ref that is live on the cluster), or --live to read the cluster")
			}
			after, err := repo.OnDisk(f.dir, f.layout())
			if err != nil {
				return err
			}
			var base *repo.Repo
			if o.base != "" {
				if base, err = repo.AtRef(f.dir, o.base, f.layout()); err != nil {
					return err
				}
			}
			var reps []*cutover.Report
			if o.live {
				rep, err := o.checkLive(cmd.Context(), base, after)
				if err != nil {
					return err
				}
				reps = append(reps, rep)
			} else if reps, err = cutover.Check(base, after); err != nil {
				return err
			}
			unsafe := false
			for _, rep := range reps {
				rep.Print(cmd.OutOrStdout())
				unsafe = unsafe || rep.Unmitigated()
			}
			if unsafe {
				return fmt.Errorf("%w: unmitigated cut-over hazards", errProblems)
			}
			return nil
		},
	}
	f.bind(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&o.base, "base", "", "git ref of what the cluster runs now (e.g. origin/main); with --live, only to list drift")
	fs.BoolVar(&o.live, "live", false, "read the app-tier Kustomizations, their inventories and objects from the cluster")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.kubeContext, "context", "", "kubeconfig context to use")
	fs.StringVar(&o.fluxNamespace, "flux-namespace", "", "namespace of the Flux Kustomizations (default: all namespaces)")
	fs.StringVar(&o.env, "env", "", "environment folder under clusters/ the cluster runs (default: the first one, else base)")
	return cmd
}

func (o cutoverFlags) checkLive(ctx context.Context, base, after *repo.Repo) (*cutover.Report, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.kubeContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	c, err := liveread.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	live, err := liveread.Read(ctx, c, liveread.Options{Apps: after.Layout.Apps, Namespace: o.fluxNamespace})
	if err != nil {
		return nil, err
	}
	where := path.Join(after.Layout.Clusters, "base")
	if o.env != "" {
		where = path.Join(after.Layout.Clusters, o.env)
	} else if envs, err := after.Environments(); err != nil {
		return nil, err
	} else if len(envs) > 0 {
		where = path.Join(after.Layout.Clusters, envs[0])
	}
	return cutover.CheckLive(live, base, after, where)
}
