package devenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/siteops/siteops/internal/decofile"
	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/audit"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/settings"
)

// Servers are the local stand-ins for what the parts talk to in production.
type Servers struct {
	// Valkey is the tenant cache: a master, a replica and three Sentinels, every one requiring
	// a password as production's should (ValkeyPasswordFile, SentinelPasswordFile).
	Valkey *servers.SentinelSet
	// ValkeyPasswordFile and SentinelPasswordFile hold the data nodes' admin password and the
	// Sentinels' password, generated for each start (mode 0600).
	ValkeyPasswordFile, SentinelPasswordFile string
	// MirrorRedis holds the mirror's watch cursors and attribution facts.
	MirrorRedis *servers.Process
	// S3 stores Decofiles of the s3 target; bucket S3Bucket is publicly readable like a CDN origin.
	S3 *servers.S3Server
	// Git serves the repositories of git-sourced Decofiles and of the mirror.
	Git *servers.GitRemote
	// Registry is an OCI registry for oci-sourced Decofiles (plain HTTP, like a registry on
	// the platform's own network).
	Registry *servers.Registry
}

// S3Bucket is the bucket the local S3 server starts with.
const S3Bucket = "decofiles"

// startServers starts every local server under dir on host, registering each stop with env, and
// points the manager's options at them.
func startServers(ctx context.Context, env *Env, dir, host string, mo *manager.Options) (*Servers, error) {
	s := &Servers{}
	var err error
	if err := startValkey(ctx, s, filepath.Join(dir, "valkey"), host, mo); err != nil {
		return nil, err
	}
	env.onStop(func() error { s.Valkey.Stop(); return nil })
	env.addLog("valkey-master", s.Valkey.Master.LogPath())
	for i, p := range s.Valkey.Replicas {
		env.addLog(fmt.Sprintf("valkey-replica-%d", i), p.LogPath())
	}
	for i, p := range s.Valkey.Sentinels {
		env.addLog(fmt.Sprintf("sentinel-%d", i), p.LogPath())
	}

	if s.MirrorRedis, err = servers.StartRedis(ctx, servers.RedisOptions{Dir: filepath.Join(dir, "mirror-redis"), Host: host}); err != nil {
		return nil, fmt.Errorf("start mirror Redis: %w", err)
	}
	env.onStop(s.MirrorRedis.Stop)
	env.addLog("mirror-redis", s.MirrorRedis.LogPath())
	mo.Mirror.RedisAddr = s.MirrorRedis.Addr

	if s.S3, err = servers.StartS3(ctx, servers.S3Options{Dir: filepath.Join(dir, "s3"), Host: host}); err != nil {
		return nil, fmt.Errorf("start S3 server: %w", err)
	}
	env.onStop(s.S3.Stop)
	env.addLog("s3", s.S3.LogPath())
	if err := s.S3.CreateBucket(ctx, S3Bucket, true); err != nil {
		return nil, err
	}
	// The s3 target uploads with the server's root account (through the standard AWS
	// environment variables, as in production) and pods load path-style from the server itself,
	// which speaks plain HTTP: the object URL injected into pods says http.
	mo.Decofile.S3.Bucket, mo.Decofile.S3.Region = S3Bucket, s.S3.Region
	mo.Decofile.S3.Endpoint, mo.Decofile.S3.PathStyle = s.S3.Endpoint, true
	mo.Decofile.S3.PublicScheme = "http"
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": s.S3.AccessKey, "AWS_SECRET_ACCESS_KEY": s.S3.SecretKey} {
		if err := os.Setenv(k, v); err != nil {
			return nil, fmt.Errorf("set %s for the s3 target: %w", k, err)
		}
	}

	if s.Git, err = servers.StartGitRemote(ctx, servers.GitRemoteOptions{Root: filepath.Join(dir, "git"), Host: host}); err != nil {
		return nil, fmt.Errorf("start git remote: %w", err)
	}
	env.onStop(s.Git.Stop)
	allowLocalGit(&mo.Decofile.Delivery, s.Git.BaseURL)
	allowLocalMirrorGit(&mo.Mirror, s.Git.BaseURL)
	if err := announcePushes(dir, mo, s.Git); err != nil {
		return nil, err
	}
	if s.Registry, err = servers.StartRegistry(ctx, servers.RegistryOptions{Addr: net.JoinHostPort(host, "0")}); err != nil {
		return nil, fmt.Errorf("start OCI registry: %w", err)
	}
	env.onStop(s.Registry.Stop)
	allowLocalGit(&mo.Decofile.Delivery, "http://"+s.Registry.Host)
	return s, nil
}

// startValkey starts the Valkey stand-in with an admin password on the data nodes and another on
// the Sentinels (an unauthenticated Sentinel lets anyone re-point the master), the limits a node
// shared by tenants needs (settings.Recommended, which `siteops tenant doctor` passes), and points the
// tenant part at it, trusting exactly its master and replica.
func startValkey(ctx context.Context, s *Servers, dir, host string, mo *manager.Options) error {
	admin, err := acl.NewPassword()
	if err != nil {
		return err
	}
	sentinel, err := acl.NewPassword()
	if err != nil {
		return err
	}
	if s.Valkey, err = servers.StartSentinelSet(ctx, servers.SentinelSetOptions{Dir: dir, Host: host, Password: admin, SentinelPassword: sentinel, NodeConfig: settings.Recommended}); err != nil {
		return fmt.Errorf("start Valkey stand-in: %w", err)
	}
	s.ValkeyPasswordFile, s.SentinelPasswordFile = filepath.Join(dir, "admin-password"), filepath.Join(dir, "sentinel-password")
	for path, p := range map[string]string{s.ValkeyPasswordFile: admin, s.SentinelPasswordFile: sentinel} {
		if err := os.WriteFile(path, []byte(p+"\n"), 0o600); err != nil {
			return fmt.Errorf("write Valkey password file: %w", err)
		}
	}
	t := &mo.Tenant
	t.SentinelAddrs, t.SentinelMaster = s.Valkey.SentinelAddrs(), s.Valkey.MasterName
	t.AdminPassword, t.SentinelPassword = admin, sentinel
	t.AllowedNodes = []string{s.Valkey.Master.Addr}
	for _, r := range s.Valkey.Replicas {
		t.AllowedNodes = append(t.AllowedNodes, r.Addr)
	}
	return nil
}

// allowLocalGit lets Decofile sources reach a local server (the git remote, the OCI registry),
// which serves plain HTTP on loopback: exactly that host and port, as a platform would allow its
// own git host or registry.
func allowLocalGit(d *decofile.DeliveryOptions, baseURL string) {
	if !slices.Contains(d.SourceAllowedSchemes, "http") {
		if len(d.SourceAllowedSchemes) == 0 {
			d.SourceAllowedSchemes = slices.Clone(egress.DefaultSchemes)
		}
		d.SourceAllowedSchemes = append(d.SourceAllowedSchemes, "http")
	}
	d.SourceAllowedHosts = append(d.SourceAllowedHosts, strings.TrimPrefix(baseURL, "http://"))
}

// allowLocalMirrorGit lets the mirror push to the local git remote (plain HTTP on loopback):
// exactly that host and port, as a platform allows its internal git host.
func allowLocalMirrorGit(m *mirror.Options, baseURL string) {
	if !slices.Contains(m.GitAllowedSchemes, "http") {
		if len(m.GitAllowedSchemes) == 0 {
			m.GitAllowedSchemes = slices.Clone(egress.DefaultSchemes)
		}
		m.GitAllowedSchemes = append(m.GitAllowedSchemes, "http")
	}
	m.GitAllowedHosts = append(m.GitAllowedHosts, strings.TrimPrefix(baseURL, "http://"))
}

// auditWebhook prepares the mirror's audit receiver on a loopback port with a throw-away CA, and
// returns the API server configuration that posts audit events to it. It stays on loopback even
// with a node: its one caller is the API server, on the machine, and it is configured before the
// node's address exists.
func auditWebhook(dir string, mo *manager.Options) (*servers.AuditWebhook, error) {
	addr, err := loopbackAddr()
	if err != nil {
		return nil, err
	}
	certs, err := servers.NewMTLS(dir, "kube-apiserver", "127.0.0.1")
	if err != nil {
		return nil, fmt.Errorf("create audit receiver certificates: %w", err)
	}
	a := &mo.Mirror.Attribution
	a.Enabled = true
	a.ListenAddress = addr
	a.CertDir = certs.CertDir
	a.ClientCAFile = certs.CAFile
	return servers.WriteAuditWebhook(dir, "https://"+addr+audit.PathPrefix+a.Route, certs, servers.WriteAuditPolicy)
}
