// Package ui runs the siteops web UI: in the manager, for people an authenticating proxy vouches
// for (reads from the manager's shared cache, filtered by SubjectAccessReviews; actions by
// impersonation), and locally with `siteops ui`, as the kubeconfig's user.
package ui

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/ui/access"
	"github.com/siteops/siteops/internal/ui/live"
	"github.com/siteops/siteops/internal/ui/web"
)

// Options configure the UI in the manager.
type Options struct {
	// BindAddress is where the UI listens; empty or "0" turns it off.
	BindAddress string
	// CertDir holds tls.crt and tls.key, the UI's serving certificate (reloaded when renewed).
	CertDir string
	// ProxyCAFile holds the CA certificates the authenticating proxy's client certificate is
	// verified against; only that proxy may connect.
	ProxyCAFile string
	// ProxyNames, when set, are the accepted common names of the proxy's client certificate.
	ProxyNames []string
	// Commits, when set, tells GitTarget pages the mirror's recent commits (the manager sets
	// it to MirrorCommits when it runs the mirror part).
	Commits web.CommitLog
	// Proofs, when set, tells the pages each Valkey node's last isolation proof (the manager
	// sets it when it runs the tenant part).
	Proofs web.IsolationProofs
}

// Enabled reports whether the UI is to be served.
func (o Options) Enabled() bool { return o.BindAddress != "" && o.BindAddress != "0" }

// Validate says what is missing for the UI to serve anyone safely.
func (o Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	if o.CertDir == "" || o.ProxyCAFile == "" {
		return errors.New("--ui-bind-address needs --ui-cert-dir and --ui-proxy-ca-file: the UI serves only people an authenticating proxy vouches for, over mTLS")
	}
	return nil
}

// watched are the kinds whose changes reach open pages, one shared informer each.
var watched = map[string]client.Object{
	"Decofile":  &decov1.Decofile{},
	"GitTarget": &mirrorv1.GitTarget{},
	"WatchRule": &mirrorv1.WatchRule{},
	"Namespace": &corev1.Namespace{},
}

// Setup adds the UI to mgr. It runs on every replica, leader or not: it only reads the cache and
// acts as the person.
func Setup(mgr manager.Manager, o Options) error {
	if !o.Enabled() {
		return nil
	}
	if err := o.Validate(); err != nil {
		return err
	}
	cw, err := certwatcher.New(filepath.Join(o.CertDir, "tls.crt"), filepath.Join(o.CertDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("UI serving certificate: %w", err)
	}
	if err := mgr.Add(cw); err != nil {
		return err
	}
	pool, err := caPool(o.ProxyCAFile)
	if err != nil {
		return err
	}
	sysClient, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("UI client: %w", err)
	}
	authz := access.NewAuthorizer(access.SubjectReviewer{Client: sysClient}, 0)
	hub := live.NewHub(authz, web.Checks())
	b := web.Backend{Objects: mgr.GetCache(), Access: authz, Hub: hub, As: impersonating(mgr), Commits: o.Commits}
	if o.Proofs != nil {
		b.Proofs = o.Proofs
	}
	log := slog.New(logr.ToSlogHandler(ctrl.Log.WithName("ui")))
	srv, err := web.New(b, web.Options{Authenticator: access.Proxy{Names: o.ProxyNames}, SecureCookies: true, Log: log})
	if err != nil {
		return err
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cw.GetCertificate,
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	return mgr.Add(runnable(func(ctx context.Context) error {
		if err := feed(ctx, mgr.GetCache(), hub); err != nil {
			return err
		}
		go func() { _ = hub.Run(ctx) }()
		ln, err := net.Listen("tcp", o.BindAddress)
		if err != nil {
			return fmt.Errorf("UI: listen on %s: %w", o.BindAddress, err)
		}
		// Refused handshakes (anyone but the proxy) are expected: log them at debug level.
		hs := &http.Server{TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
		ctrl.Log.WithName("ui").Info("serving the UI", "address", ln.Addr().String())
		return srv.Run(ctx, hs, func() error { return hs.ServeTLS(ln, "", "") })
	}))
}

// impersonating returns clients that act as a person: the API server authorizes each action
// as that person, never as the manager.
func impersonating(mgr manager.Manager) func(access.Person) (client.Client, error) {
	return func(p access.Person) (client.Client, error) {
		cfg := rest.CopyConfig(mgr.GetConfig())
		cfg.Impersonate = rest.ImpersonationConfig{UserName: p.User, Groups: p.Groups}
		return client.New(cfg, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	}
}

// feed publishes every change of the watched kinds to hub.
func feed(ctx context.Context, informers cache.Informers, hub *live.Hub) error {
	return feedKinds(ctx, informers, hub, web.Checks())
}

// feedKinds publishes every change of the kinds named in kinds to hub.
func feedKinds(ctx context.Context, informers cache.Informers, hub *live.Hub, kinds map[string]access.Check) error {
	for kind := range kinds {
		obj := watched[kind]
		inf, err := informers.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("UI: watch %ss: %w", kind, err)
		}
		publish := func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			m, ok := o.(client.Object)
			if !ok {
				return
			}
			ns := m.GetNamespace()
			if kind == "Namespace" {
				ns = m.GetName()
			}
			hub.Publish(live.Change{Kind: kind, Namespace: ns, Name: m.GetName()})
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    publish,
			UpdateFunc: func(_, o any) { publish(o) },
			DeleteFunc: publish,
		}); err != nil {
			return fmt.Errorf("UI: watch %ss: %w", kind, err)
		}
	}
	return nil
}

func caPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read the UI's proxy CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the UI's proxy CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}

// runnable is a manager.Runnable that runs on every replica.
type runnable func(ctx context.Context) error

func (r runnable) Start(ctx context.Context) error { return r(ctx) }

// NeedLeaderElection is false: every replica serves the UI.
func (runnable) NeedLeaderElection() bool { return false }
