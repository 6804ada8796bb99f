package ui

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/mirror/verify"
	"github.com/siteops/siteops/internal/ui/access"
	"github.com/siteops/siteops/internal/ui/live"
	"github.com/siteops/siteops/internal/ui/web"
	"github.com/siteops/siteops/internal/waves/diagram"
)

// LocalOptions configure `siteops ui`.
type LocalOptions struct {
	// Address to listen on, loopback by default.
	Address string
	// Namespace is where the UI looks when the user may not list every namespace.
	Namespace string
	// Scheme knows siteops' types.
	Scheme *runtime.Scheme
	// Out receives the address to open, unless Ready is set.
	Out io.Writer
	// Ready, when set, receives the address to open (with its sign-in token) once the UI serves.
	Ready func(url string)
	// Log receives request failures.
	Log *slog.Logger
	// Waves, when set, plans the waves page from a repository (siteops ui --waves-repo).
	Waves func(ctx context.Context) (*diagram.Graph, error)
	// Verify, when set, checks the mirror's attribution for the Mirror page (siteops ui
	// --verify-repo --audit-log).
	Verify func(ctx context.Context) (*verify.Report, error)
}

// RunLocal serves the UI as cfg's user until ctx is done. It opens nothing by itself: it prints
// the address, with the token that signs the browser in.
func RunLocal(ctx context.Context, cfg *rest.Config, o LocalOptions) error {
	direct, err := client.New(cfg, client.Options{Scheme: o.Scheme})
	if err != nil {
		return fmt.Errorf("connect to the cluster: %w", err)
	}
	me := whoAmI(ctx, direct)
	authz := access.NewAuthorizer(access.SelfReviewer{Client: direct}, 0)
	copts := cache.Options{Scheme: o.Scheme, DefaultTransform: cache.TransformStripManagedFields()}
	everywhere := authz.Allowed(ctx, me, access.Check{Verb: "list", Group: "deco.sites", Resource: "decofiles"})
	if !everywhere {
		copts.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
	}
	namespaces := authz.Allowed(ctx, me, access.Check{Verb: "watch", Resource: "namespaces"})
	c, err := cache.New(cfg, copts)
	if err != nil {
		return fmt.Errorf("read the cluster as %s: %w", me.User, err)
	}
	kinds := map[string]access.Check{}
	for kind, check := range web.Checks() {
		if kind != "Namespace" || namespaces {
			kinds[kind] = check
		}
	}
	hub := live.NewHub(authz, kinds)
	go func() { _ = c.Start(ctx) }()
	if err := feedKinds(ctx, c, hub, kinds); err != nil {
		return err
	}
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("read the cluster as %s: the cache did not sync", me.User)
	}
	sess, err := access.NewLocal(me)
	if err != nil {
		return err
	}
	b := web.Backend{Objects: localReader{cache: c, direct: direct, namespaces: namespaces}, Access: authz, Hub: hub,
		As: func(access.Person) (client.Client, error) { return direct, nil }, Waves: o.Waves, Verify: o.Verify}
	srv, err := web.New(b, web.Options{Authenticator: sess, Local: sess, Log: o.Log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Address)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.Address, err)
	}
	go func() { _ = hub.Run(ctx) }()
	url := fmt.Sprintf("http://%s/?token=%s", ln.Addr(), sess.Token())
	if o.Ready != nil {
		o.Ready(url)
	} else {
		fmt.Fprintf(o.Out, "siteops ui for %s: open %s\n", me.User, url)
	}
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second}
	return srv.Run(ctx, hs, func() error { return hs.Serve(ln) })
}

// whoAmI asks the API server who the kubeconfig's credentials are.
func whoAmI(ctx context.Context, c client.Client) access.Person {
	r := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, r); err != nil {
		return access.Person{User: "you"}
	}
	return access.Person{User: r.Status.UserInfo.Username, Groups: r.Status.UserInfo.Groups}
}

// localReader reads the cache, but Namespaces directly (and none in lists) when the user may
// not watch them: a tenant's rights stop at its namespace.
type localReader struct {
	cache      client.Reader
	direct     client.Reader
	namespaces bool
}

func (r localReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Namespace); ok && !r.namespaces {
		return r.direct.Get(ctx, key, obj, opts...)
	}
	return r.cache.Get(ctx, key, obj, opts...)
}

func (r localReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.NamespaceList); ok && !r.namespaces {
		return nil
	}
	return r.cache.List(ctx, list, opts...)
}
