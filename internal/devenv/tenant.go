package devenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// DefaultTenantTokenTTL is how long a tenant's token is valid unless TenantOptions says otherwise.
const DefaultTenantTokenTTL = 24 * time.Hour

// TenantOptions configures AddTenant.
type TenantOptions struct {
	// AdminKubeconfig is the running dev environment's admin kubeconfig.
	AdminKubeconfig string
	// Name names the tenant: its namespace and its ServiceAccount there.
	Name string
	// Out is where the tenant's kubeconfig is written; default TenantKubeconfigPath.
	Out string
	// TokenTTL is how long the tenant's token is valid; default DefaultTenantTokenTTL.
	TokenTTL time.Duration
}

// TenantKubeconfigPath is where AddTenant writes name's kubeconfig by default: tenants/<name>.kubeconfig
// next to the admin kubeconfig.
func TenantKubeconfigPath(adminKubeconfig, name string) string {
	return filepath.Join(filepath.Dir(adminKubeconfig), "tenants", name+".kubeconfig")
}

// AddTenant makes a tenant of the threat model in a running dev environment: namespace Name, a
// ServiceAccount Name in it bound to the built-in `edit` ClusterRole in that namespace only, and
// a kubeconfig authenticating with a token of that ServiceAccount. It returns the kubeconfig's
// path once the tenant may create Decofiles in its namespace. Running it again keeps what exists
// and writes a fresh token.
func AddTenant(ctx context.Context, o TenantOptions) (string, error) {
	if errs := validation.IsDNS1123Label(o.Name); len(errs) > 0 {
		return "", fmt.Errorf("tenant name %q: %s", o.Name, strings.Join(errs, "; "))
	}
	if o.Name == "default" || strings.HasPrefix(o.Name, "kube-") {
		return "", fmt.Errorf("tenant name %q: %s belongs to the cluster; choose another name", o.Name, o.Name)
	}
	if o.Out == "" {
		o.Out = TenantKubeconfigPath(o.AdminKubeconfig, o.Name)
	}
	if o.TokenTTL <= 0 {
		o.TokenTTL = DefaultTenantTokenTTL
	}
	raw, err := clientcmd.LoadFromFile(o.AdminKubeconfig)
	if err != nil {
		return "", fmt.Errorf("read the dev environment's kubeconfig (is `siteops dev up` running?): %w", err)
	}
	adminCfg, err := clientcmd.NewDefaultClientConfig(*raw, nil).ClientConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig %s: %w", o.AdminKubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(adminCfg)
	if err != nil {
		return "", err
	}
	ns, name := o.Name, o.Name
	if err := ensure(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})); err != nil {
		return "", fmt.Errorf("create namespace %s (is `siteops dev up` running?): %w", ns, err)
	}
	if err := ensure(cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{})); err != nil {
		return "", fmt.Errorf("create ServiceAccount %s/%s: %w", ns, name, err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}
	if err := ensure(cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{})); err != nil {
		return "", fmt.Errorf("bind %s to edit in %s: %w", name, ns, err)
	}
	secs := int64(o.TokenTTL / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request a token for ServiceAccount %s/%s: %w", ns, name, err)
	}
	kc, err := tenantKubeconfig(raw, ns, name, tr.Status.Token)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(o.Out), 0o700); err != nil {
		return "", fmt.Errorf("create the folder of %s: %w", o.Out, err)
	}
	if err := clientcmd.WriteToFile(*kc, o.Out); err != nil {
		return "", fmt.Errorf("write the tenant's kubeconfig: %w", err)
	}
	if err := waitForEdit(ctx, o.Out, ns); err != nil {
		return "", err
	}
	return o.Out, nil
}

// ensure treats an object that already exists as created, so AddTenant can run again.
func ensure[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// tenantKubeconfig is admin's current cluster with the tenant's token as its only user, in the
// tenant's namespace.
func tenantKubeconfig(admin *clientcmdapi.Config, ns, name, token string) (*clientcmdapi.Config, error) {
	cur, ok := admin.Contexts[admin.CurrentContext]
	if !ok || admin.Clusters[cur.Cluster] == nil {
		return nil, errors.New("the dev environment's kubeconfig has no current cluster")
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[cur.Cluster] = admin.Clusters[cur.Cluster].DeepCopy()
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: cur.Cluster, AuthInfo: name, Namespace: ns}
	kc.CurrentContext = name
	return kc, nil
}

// waitForEdit waits until the tenant's kubeconfig may create Decofiles in ns: the binding takes
// effect once the authorizer has seen it, and never when `edit` lacks siteops' tenant roles.
func waitForEdit(ctx context.Context, kubeconfig, ns string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 20, 20 // above the polling rate: a throttled review would hide the answer
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var lastErr error // of the last review that got no answer; nil once one said "denied"
	for {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "deco.sites", Resource: "decofiles"},
		}}
		got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		switch {
		case err == nil && got.Status.Allowed:
			return nil
		case err == nil:
			lastErr = nil
		case ctx.Err() == nil:
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("ask whether the tenant may create Decofiles in %s: %w", ns, lastErr)
			}
			return fmt.Errorf("the tenant may not create Decofiles in %s: the edit ClusterRole lacks siteops' tenant roles; restart `siteops dev up`, which aggregates them", ns)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
