package devenv

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/mirror/audit"
)

// Component is one running part of the environment and where to reach it.
type Component struct {
	// Name says what it is ("API server", "Valkey master", ...).
	Name string
	// Address is where it listens (a URL or host:port), or a path for files.
	Address string
	// Log is its log file; empty for files and in-process servers without one.
	Log string
}

// Components lists what runs and where, in the order `dev up` prints them.
func (e *Env) Components() []Component {
	var out []Component
	add := func(name, addr, log string) { out = append(out, Component{Name: name, Address: addr, Log: log}) }
	logOf := func(name string) string {
		for _, l := range e.logs {
			if l.name == name {
				return l.path
			}
		}
		return ""
	}
	if e.api != nil {
		add("API server", e.Config.Host, logOf("kube-apiserver"))
		if etcd := e.api.Env.ControlPlane.Etcd; etcd != nil && etcd.URL != nil {
			add("etcd", etcd.URL.String(), logOf("etcd"))
		}
	}
	if n := e.Node; n != nil {
		add("node", fmt.Sprintf("%s at %s, pods %s", n.Name, n.IP, n.PodCIDR), logOf("kubelet"))
		refs := make([]string, 0, len(e.Images))
		for _, img := range e.Images {
			refs = append(refs, img.Ref)
		}
		slices.Sort(refs)
		add("node images", strings.Join(refs, ", "), "")
	}
	if e.uiURL != "" {
		add("web UI", e.uiURL, "")
	}
	mo := e.manager
	if mo.MetricsAddr != "" {
		addr := "metrics http://" + mo.MetricsAddr + "/metrics"
		if webhooksWanted(&mo) {
			addr += fmt.Sprintf(", webhooks https://%s:%d", mo.WebhookHost, mo.WebhookPort)
		}
		add("manager", addr, logOf("manager"))
	}
	if s := e.Servers; s != nil {
		add("Valkey master", fmt.Sprintf("%s (Sentinel name %s, password in %s)", s.Valkey.Master.Addr, s.Valkey.MasterName, s.ValkeyPasswordFile), logOf("valkey-master"))
		for i, r := range s.Valkey.Replicas {
			add("Valkey replica", r.Addr, logOf(fmt.Sprintf("valkey-replica-%d", i)))
		}
		add("Valkey Sentinels", strings.Join(s.Valkey.SentinelAddrs(), ", ")+" (password in "+s.SentinelPasswordFile+")", logOf("sentinel-0"))
		add("Redis (mirror)", s.MirrorRedis.Addr, logOf("mirror-redis"))
		add("S3", fmt.Sprintf("%s, bucket %s (public read)", s.S3.Endpoint, S3Bucket), logOf("s3"))
		add("git remote", s.Git.BaseURL, "")
		add("OCI registry", "oci://"+s.Registry.Host, "")
	}
	if mo.Enabled(manager.PartMirror) && mo.Mirror.Attribution.Enabled {
		a := mo.Mirror.Attribution
		add("audit receiver", "https://"+a.ListenAddress+audit.PathPrefix+a.Route, logOf("manager"))
	}
	add("kubeconfig", e.KubeconfigPath, "")
	add("log folder", e.logDir, "")
	return out
}

// WriteTable prints Components as a table; log paths are shown relative to the state folder.
func (e *Env) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  COMPONENT\tADDRESS\tLOG")
	for _, c := range e.Components() {
		log := c.Log
		if rel, err := filepath.Rel(e.StateDir, log); err == nil && log != "" && !strings.HasPrefix(rel, "..") {
			log = rel
		}
		if log == "" {
			log = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Name, c.Address, log)
	}
	return tw.Flush()
}
