package cli

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/scheme"
)

// kubeFlags are kubectl's connection flags, read the way kubectl reads them.
type kubeFlags struct {
	kubeconfig  string
	kubeContext string
	namespace   string
}

// bindConnection adds --kubeconfig and --context.
func (k *kubeFlags) bindConnection(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&k.kubeContext, "context", "", "kubeconfig context to use")
}

// bind adds --kubeconfig, --context and -n with the given help for -n.
func (k *kubeFlags) bind(fs *pflag.FlagSet, namespaceHelp string) {
	k.bindConnection(fs)
	fs.StringVarP(&k.namespace, "namespace", "n", "", namespaceHelp)
}

// restConfig loads the kubeconfig and returns it with the namespace: -n, else the context's.
func (k kubeFlags) restConfig() (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: k.kubeContext}
	overrides.Context.Namespace = k.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("load kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("namespace from kubeconfig: %w", err)
	}
	return cfg, ns, nil
}

// client returns a watching client with the siteops scheme and the namespace.
func (k kubeFlags) client() (client.WithWatch, string, error) {
	cfg, ns, err := k.restConfig()
	if err != nil {
		return nil, "", err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, "", fmt.Errorf("create Kubernetes client: %w", err)
	}
	return c, ns, nil
}

// kubeClient returns a client for the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)
// and context (default: the current one).
func kubeClient(kubeconfig, kubeContext string) (client.Client, error) {
	c, _, err := kubeFlags{kubeconfig: kubeconfig, kubeContext: kubeContext}.client()
	return c, err
}
