// Package ui runs the siteops web UI: in the manager, for people an authenticating proxy vouches
// for or who sign in with OIDC (reads from the manager's shared cache, filtered by
// SubjectAccessReviews; actions by impersonation), and locally with `siteops ui`, as the
// kubeconfig's user.
package ui

import (
	"bytes"
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
	// OIDC, when its IssuerURL is set, signs people in with an OpenID Connect issuer directly;
	// beside ProxyCAFile, connections with the proxy's certificate still use its headers.
	OIDC OIDCOptions
	// Commits, when set, tells GitTarget pages the mirror's recent commits (the manager sets
	// it to MirrorCommits when it runs the mirror part).
	Commits web.CommitLog
	// Pending, when set, tells GitTarget pages the changes the mirror holds but has not pushed
	// yet (the manager sets it to MirrorPending when it runs the mirror part).
	Pending web.PendingLog
	// Proofs, when set, tells the pages each Valkey node's last isolation proof (the manager
	// sets it when it runs the tenant part).
	Proofs web.IsolationProofs
}

// OIDCOptions configure signing in with OIDC (access.OIDC); the claims and prefixes are
// kube-apiserver's --oidc-* flags, so the UI's people are the API server's.
type OIDCOptions struct {
	// IssuerURL is the issuer (https).
	IssuerURL string
	// ClientID is the UI's client at the issuer; ClientSecretFile holds its secret.
	ClientID, ClientSecretFile string
	// RedirectURL is https://<the UI's host>/auth/callback, registered at the issuer.
	RedirectURL string
	// UsernameClaim (default "email") and GroupsClaim (default "groups") name the person.
	UsernameClaim, GroupsClaim string
	// UsernamePrefix and GroupsPrefix are put before the user name and each group.
	UsernamePrefix, GroupsPrefix string
	// CookieSecretFile holds the secret the session cookies are sealed with (at least 32 bytes).
	CookieSecretFile string
	// CAFile, when set, holds the CA certificates the issuer's certificate is verified against,
	// instead of the system's.
	CAFile string
}

// Enabled reports whether the UI is to be served.
func (o Options) Enabled() bool { return o.BindAddress != "" && o.BindAddress != "0" }

// Validate says what is missing for the UI to serve anyone safely.
func (o Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	if o.CertDir == "" {
		errs = append(errs, errors.New("--ui-bind-address needs --ui-cert-dir: the UI serves HTTPS only"))
	}
	if o.ProxyCAFile == "" && o.OIDC.IssuerURL == "" {
		errs = append(errs, errors.New("--ui-bind-address needs --ui-proxy-ca-file (people an authenticating proxy vouches for, over mTLS), --ui-oidc-issuer-url (people sign in with OIDC), or both: the UI serves no one anonymously"))
	}
	return errors.Join(append(errs, o.OIDC.validate())...)
}

// validate says which OIDC flag is missing or wrong.
func (o OIDCOptions) validate() error {
	if o.IssuerURL == "" {
		for _, f := range []struct{ flag, v string }{{"--ui-oidc-client-id", o.ClientID}, {"--ui-oidc-client-secret-file", o.ClientSecretFile},
			{"--ui-oidc-redirect-url", o.RedirectURL}, {"--ui-oidc-cookie-secret-file", o.CookieSecretFile}} {
			if f.v != "" {
				return fmt.Errorf("%s is set without --ui-oidc-issuer-url: set the issuer to sign people in with OIDC", f.flag)
			}
		}
		return nil
	}
	var errs []error
	if err := access.ValidateIssuerURL(o.IssuerURL); err != nil {
		errs = append(errs, fmt.Errorf("--ui-oidc-issuer-url: %w", err))
	}
	if o.ClientID == "" {
		errs = append(errs, errors.New("--ui-oidc-issuer-url needs --ui-oidc-client-id: the UI's client at the issuer"))
	}
	if o.ClientSecretFile == "" {
		errs = append(errs, errors.New("--ui-oidc-issuer-url needs --ui-oidc-client-secret-file: a file holding the client's secret"))
	}
	if o.RedirectURL == "" {
		errs = append(errs, errors.New("--ui-oidc-issuer-url needs --ui-oidc-redirect-url: https://<the UI's host>/auth/callback, as registered at the issuer"))
	} else if err := access.ValidateRedirectURL(o.RedirectURL); err != nil {
		errs = append(errs, fmt.Errorf("--ui-oidc-redirect-url: %w", err))
	}
	if o.CookieSecretFile == "" {
		errs = append(errs, errors.New("--ui-oidc-issuer-url needs --ui-oidc-cookie-secret-file: a file of at least 32 random bytes sealing the session cookies (head -c 32 /dev/urandom | base64)"))
	}
	return errors.Join(errs...)
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
	log := slog.New(logr.ToSlogHandler(ctrl.Log.WithName("ui")))
	authn, login, certs, err := authentication(o, log)
	if err != nil {
		return err
	}
	sysClient, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("UI client: %w", err)
	}
	authz := access.NewAuthorizer(access.SubjectReviewer{Client: sysClient}, 0)
	hub := live.NewHub(authz, web.Checks())
	b := web.Backend{Objects: mgr.GetCache(), Access: authz, Hub: hub, As: impersonating(mgr), Commits: o.Commits, Proofs: o.Proofs,
		Pending: o.Pending}
	wo := web.Options{Authenticator: authn, SecureCookies: true, Log: log}
	if login != nil {
		wo.Login = login.Handler()
	}
	srv, err := web.New(b, wo)
	if err != nil {
		return err
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cw.GetCertificate,
		ClientAuth: certs.mode, ClientCAs: certs.pool}
	return mgr.Add(runnable(func(ctx context.Context) error {
		if err := feed(ctx, mgr.GetCache(), hub); err != nil {
			return err
		}
		go func() { _ = hub.Run(ctx) }()
		if login != nil {
			go func() {
				if err := login.Discover(ctx); err != nil {
					log.Warn("the OIDC issuer does not answer yet: sign-ins fail until it does", "err", err)
				}
			}()
		}
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

// clientCerts is what the UI's TLS server asks of clients.
type clientCerts struct {
	mode tls.ClientAuthType
	pool *x509.CertPool
}

// authentication returns who the UI believes: the proxy alone (it must present its client
// certificate), OIDC alone (no client certificate asked), or both (a verified certificate
// means the proxy; anyone else must hold a session).
func authentication(o Options, log *slog.Logger) (access.Authenticator, *access.OIDC, clientCerts, error) {
	var certs clientCerts
	if o.ProxyCAFile != "" {
		pool, err := caPool(o.ProxyCAFile)
		if err != nil {
			return nil, nil, certs, err
		}
		certs = clientCerts{tls.RequireAndVerifyClientCert, pool}
	}
	proxy := access.Proxy{Names: o.ProxyNames}
	if o.OIDC.IssuerURL == "" {
		return proxy, nil, certs, nil
	}
	login, err := newOIDC(o.OIDC, log)
	if err != nil {
		return nil, nil, certs, err
	}
	if o.ProxyCAFile == "" {
		return login, login, clientCerts{mode: tls.NoClientCert}, nil
	}
	certs.mode = tls.VerifyClientCertIfGiven
	return access.ProxyOr{Proxy: proxy, Else: login}, login, certs, nil
}

// newOIDC reads the OIDC secrets and the issuer's CA.
func newOIDC(o OIDCOptions, log *slog.Logger) (*access.OIDC, error) {
	clientSecret, err := readSecret(o.ClientSecretFile, "--ui-oidc-client-secret-file")
	if err != nil {
		return nil, err
	}
	cookieSecret, err := readSecret(o.CookieSecretFile, "--ui-oidc-cookie-secret-file")
	if err != nil {
		return nil, err
	}
	var hc *http.Client
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--ui-oidc-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ui-oidc-ca-file %s holds no PEM certificate", o.CAFile)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
		hc = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	login, err := access.NewOIDC(access.OIDCConfig{IssuerURL: o.IssuerURL, ClientID: o.ClientID, ClientSecret: string(clientSecret),
		RedirectURL: o.RedirectURL, UsernameClaim: o.UsernameClaim, GroupsClaim: o.GroupsClaim, UsernamePrefix: o.UsernamePrefix,
		GroupsPrefix: o.GroupsPrefix, CookieSecret: cookieSecret, HTTPClient: hc, Log: log})
	if err != nil {
		return nil, fmt.Errorf("UI OIDC sign-in: %w", err)
	}
	return login, nil
}

// readSecret reads a secret from file, without the white space around it.
func readSecret(file, flag string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if b = bytes.TrimSpace(b); len(b) == 0 {
		return nil, fmt.Errorf("%s: %s is empty", flag, file)
	}
	return b, nil
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
