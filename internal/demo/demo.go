// Package demo walks through every siteops part against a local environment, checking each step
// and ending with a summary table. `make demo` runs it through `siteops dev demo`, on a real node
// when the machine can run one.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/devenv"
)

// Step is one checked stage of the demo.
type Step struct {
	// Name says what the step shows.
	Name string
	// Run performs the step and returns a one-line result, or an error when its check fails.
	Run func(ctx context.Context, env *devenv.Env, out io.Writer) (string, error)
}

// Runner runs a siteops command line in-process, writing its output to out.
type Runner func(ctx context.Context, out io.Writer, args ...string) error

// Steps lists the demo's stages in order; run executes siteops commands and examples is the
// sample wave-planner repository.
func Steps(run Runner, examples string) ([]Step, func()) {
	s := &site{namespace: "sites-demo", name: "storefront"}
	return []Step{
		{Name: "control plane", Run: controlPlane},
		{Name: "tenant cache isolation", Run: tenantACL(s.namespace)},
		{Name: "Decofile from git", Run: s.gitSourcedDecofile},
		{Name: "Decofile from an OCI artifact", Run: ociSourcedDecofile(s.namespace)},
		{Name: "injected site pods", Run: s.injectedPods},
		{Name: "edit and rollout", Run: s.editAndRollout(run)},
		{Name: "S3 target and back", Run: s.flipTargets},
		{Name: "cluster→git mirror", Run: mirrorToGit(s.namespace)},
		{Name: "wave planner", Run: waves(examples, run)},
		{Name: "web UI", Run: webUI},
	}, s.stop
}

type result struct {
	name, detail string
	took         time.Duration
	err          error
}

// Run starts the local environment, runs steps in order, stops at the first failing one, prints a
// summary table and stops the environment. The error names the failing step.
func Run(ctx context.Context, o devenv.Options, steps []Step, out io.Writer) (err error) {
	o.Out = out
	env, err := devenv.Start(ctx, o)
	if err != nil {
		return fmt.Errorf("demo: start local environment: %w", err)
	}
	defer func() { err = errors.Join(err, env.Stop()) }()
	fmt.Fprintln(out)
	if err := env.WriteTable(out); err != nil {
		return err
	}
	fmt.Fprintln(out, PodsLine(env))

	var results []result
	var failed error
	for i, s := range steps {
		fmt.Fprintf(out, "\n==> [%d/%d] %s\n", i+1, len(steps), s.Name)
		start := time.Now()
		detail, err := s.Run(ctx, env, out)
		r := result{name: s.Name, detail: detail, took: time.Since(start).Round(10 * time.Millisecond), err: err}
		results = append(results, r)
		if err != nil {
			fmt.Fprintf(out, "    FAILED: %v\n", err)
			failed = fmt.Errorf("demo step %q failed: %w", s.Name, err)
			break
		}
		fmt.Fprintf(out, "    ok: %s\n", detail)
	}
	fmt.Fprintln(out, "\nsummary:")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tRESULT\tTIME\tDETAIL")
	for _, r := range results {
		status, detail := "ok", r.detail
		if r.err != nil {
			status, detail = "FAILED", r.err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.name, status, r.took, detail)
	}
	for _, s := range steps[len(results):] {
		fmt.Fprintf(tw, "%s\t%s\t-\t\n", s.Name, "not run")
	}
	if err := tw.Flush(); err != nil {
		return errors.Join(failed, err)
	}
	fmt.Fprintln(out, PodsLine(env))
	return failed
}

func controlPlane(ctx context.Context, env *devenv.Env, out io.Writer) (string, error) {
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := env.Client.List(ctx, &crds); err != nil {
		return "", fmt.Errorf("list CRDs: %w", err)
	}
	for _, c := range crds.Items {
		fmt.Fprintf(out, "    crd %s\n", c.Name)
	}
	var nss corev1.NamespaceList
	if err := env.Client.List(ctx, &nss); err != nil {
		return "", fmt.Errorf("list namespaces: %w", err)
	}
	for _, n := range nss.Items {
		fmt.Fprintf(out, "    namespace %s\n", n.Name)
	}
	if len(crds.Items) == 0 {
		return "", errors.New("no siteops CRDs installed")
	}
	detail := fmt.Sprintf("%d CRDs installed, %d namespaces, kubeconfig %s", len(crds.Items), len(nss.Items), env.KubeconfigPath)
	if env.Node != nil {
		var n corev1.Node
		if err := env.Client.Get(ctx, client.ObjectKey{Name: env.Node.Name}, &n); err != nil {
			return "", fmt.Errorf("read Node %s: %w", env.Node.Name, err)
		}
		fmt.Fprintf(out, "    node %s: kubelet %s, %s, InternalIP %s\n", n.Name, n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.ContainerRuntimeVersion, env.Node.IP)
		detail += fmt.Sprintf(", node %s Ready", n.Name)
	}
	return detail, nil
}
