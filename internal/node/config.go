package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"text/template"
)

// Kernel tunables kubelet checks at start, with the values it insists on. The node's private
// mount namespace shows it files holding these values in place of the machine's /proc/sys
// entries, so kubelet (with protectKernelDefaults) neither refuses to start nor rewrites them.
var kubeletSysctls = []struct{ Path, Value string }{
	{"vm/overcommit_memory", "1"},
	{"vm/panic_on_oom", "0"},
	{"kernel/panic", "10"},
	{"kernel/panic_on_oops", "1"},
	{"kernel/keys/root_maxkeys", "1000000"},
	{"kernel/keys/root_maxbytes", "25000000"},
}

// configValues are the inputs of the node's configuration files.
type configValues struct {
	// Dir is the state folder; BinDir holds runc and cni/.
	Dir, BinDir string
	// NodeIP is the host end of the veth pair: kubelet listens there and reports it.
	NodeIP string
	// NamespaceIP is the namespace's end, where CoreDNS answers the pods.
	NamespaceIP string
	// PodCIDR is the pod subnet on the bridge inside the node's network namespace.
	PodCIDR string
	// CgroupRoot is the cgroup (in every hierarchy) that holds all the node's pods.
	CgroupRoot string
	// ContainerdSocket is containerd's gRPC socket (in Dir, reachable from the machine).
	ContainerdSocket string
	// ClientCAFile authenticates callers of the kubelet API (the API server's client
	// certificate); empty refuses every caller.
	ClientCAFile string
	// PauseImage is the pinned sandbox image.
	PauseImage string
}

// kubeletConfig is a KubeletConfiguration that keeps the kubelet's hands off the machine:
// cgroup v1 accepted (these machines are hybrid), no iptables chains, kernel defaults only read,
// no swap check, DNS from a file of the node's own, and tiny eviction thresholds (the node's
// disks are tmpfs shared with everything else on the machine).
func kubeletConfig(v configValues) ([]byte, error) {
	auth := map[string]any{
		"anonymous": map[string]any{"enabled": false},
		"webhook":   map[string]any{"enabled": false},
	}
	if v.ClientCAFile != "" {
		auth["x509"] = map[string]any{"clientCAFile": v.ClientCAFile}
	}
	cfg := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"address":                     v.NodeIP,
		"port":                        10250,
		"readOnlyPort":                0,
		"healthzPort":                 0,
		"authentication":              auth,
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
		"containerRuntimeEndpoint":    "unix://" + v.ContainerdSocket,
		"cgroupDriver":                "cgroupfs",
		"cgroupRoot":                  v.CgroupRoot,
		"cgroupsPerQOS":               true,
		"failCgroupV1":                false,
		"failSwapOn":                  false,
		"makeIPTablesUtilChains":      false,
		"protectKernelDefaults":       true,
		"oomScoreAdj":                 0,
		"resolvConf":                  v.Dir + "/resolv.conf",
		"clusterDomain":               "cluster.local",
		"clusterDNS":                  []string{v.NamespaceIP},
		"podCIDR":                     v.PodCIDR,
		"maxPods":                     110, // the kubelet default; the pod /24 holds 253
		"serializeImagePulls":         false,
		"syncFrequency":               "10s",
		"nodeStatusUpdateFrequency":   "4s",
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available":  "10Mi",
			"nodefs.available":  "1%",
			"nodefs.inodesFree": "1%",
			"imagefs.available": "1%",
		},
		"evictionPressureTransitionPeriod": "5s",
		"containerLogMaxSize":              "5Mi",
		"containerLogMaxFiles":             2,
		"shutdownGracePeriod":              "0s",
		"volumeStatsAggPeriod":             "10s",
	}
	return json.MarshalIndent(cfg, "", "  ")
}

var containerdTemplate = template.Must(template.New("containerd").Parse(`# containerd of one siteops development node (generated).
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "{{.ContainerdSocket}}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{{.PauseImage}}"
  # Per-registry settings (hosts.toml), read at each pull: Node.AllowPlainHTTPRegistry.
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "{{.Dir}}/certs.d"

[plugins.'io.containerd.cri.v1.runtime']
  # Root here lacks CAP_SYS_RESOURCE: runc may only raise a process's oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{{.BinDir}}/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{{.BinDir}}/cni"]
    conf_dir = "{{.Dir}}/cni"

[plugins.'io.containerd.grpc.v1.cri']
  # Inside the node's network namespace: its own loopback.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`))

// containerdConfig is containerd's configuration: state on the node's tmpfs, the gRPC socket in
// the state folder, the pinned local pause image, runc and the CNI plugins from BinDir.
func containerdConfig(v configValues) ([]byte, error) {
	var b bytes.Buffer
	if err := containerdTemplate.Execute(&b, v); err != nil {
		return nil, fmt.Errorf("containerd configuration: %w", err)
	}
	return b.Bytes(), nil
}

// cniConfig is the pod network: a bridge in the node's network namespace that is the pods'
// gateway. No masquerade and no route beyond the namespace: the node's namespace routes only to
// the machine's end of the veth pair, so pod traffic never leaves the machine.
func cniConfig(v configValues) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "siteops-node",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "cni0",
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": v.PodCIDR}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": v.Dir + "/cni-ipam",
				},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// kubeProxyConfig runs kube-proxy in iptables mode inside the node's network namespace (its
// rules and sysctls stay there). Conntrack limits are left as they are: nf_conntrack_max is
// the machine's, not the namespace's.
func kubeProxyConfig(v configValues, nodeName string) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":       "kubeproxy.config.k8s.io/v1alpha1",
		"kind":             "KubeProxyConfiguration",
		"mode":             "iptables",
		"hostnameOverride": nodeName,
		"clusterCIDR":      v.PodCIDR,
		"clientConnection": map[string]any{"kubeconfig": v.Dir + "/kube-proxy.kubeconfig"},
		"conntrack": map[string]any{
			"maxPerCore": 0, "min": 0,
			"tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
		},
		"iptables":           map[string]any{"localhostNodePorts": false, "syncPeriod": "10s", "minSyncPeriod": "0s"},
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
	}
	return json.MarshalIndent(cfg, "", "  ")
}

var corefileTemplate = template.Must(template.New("Corefile").Parse(`# Cluster DNS of one siteops development node (generated). Only cluster names are answered:
# nothing is forwarded, so no query leaves the machine.
.:53 {
    bind {{.NodeIP}}
    errors
    ready {{.NodeIP}}:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig {{.Dir}}/kube-proxy.kubeconfig {{.Context}}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
}
`))

// corefile is CoreDNS's configuration: it serves the cluster's names on the namespace's end of
// the veth pair (the pods' nameserver), reading Services through the relay.
func corefile(dir, nodeIP, context string) ([]byte, error) {
	var b bytes.Buffer
	err := corefileTemplate.Execute(&b, struct{ Dir, NodeIP, Context string }{dir, nodeIP, context})
	if err != nil {
		return nil, fmt.Errorf("CoreDNS configuration: %w", err)
	}
	return b.Bytes(), nil
}
