package node

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// TestKubeletConfigKeepsOffTheMachine pins the settings that keep kubelet from changing the
// machine: no iptables chains, kernel tunables only read, cgroup v1 accepted under the node's
// own cgroup, and no caller accepted without the API server's certificate.
func TestKubeletConfigKeepsOffTheMachine(t *testing.T) {
	b, err := kubeletConfig(configValues{Dir: "/d", NodeIP: "10.244.0.1", PodCIDR: "10.244.1.0/24",
		CgroupRoot: "/siteops-node-0", ContainerdSocket: "/d/containerd.sock", ClientCAFile: "/ca.crt"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"makeIPTablesUtilChains": false, "protectKernelDefaults": true, "failCgroupV1": false,
		"failSwapOn": false, "cgroupDriver": "cgroupfs", "cgroupRoot": "/siteops-node-0",
		"address": "10.244.0.1", "readOnlyPort": float64(0), "resolvConf": "/d/resolv.conf",
	} {
		if cfg[key] != want {
			t.Errorf("%s = %v, want %v", key, cfg[key], want)
		}
	}
	auth := cfg["authentication"].(map[string]any)
	if auth["anonymous"].(map[string]any)["enabled"] != false || auth["x509"].(map[string]any)["clientCAFile"] != "/ca.crt" {
		t.Errorf("authentication = %v", auth)
	}
}

// TestCNIConfigStaysInTheNamespace pins the pod network: no masquerade, the pod subnet only.
func TestCNIConfigStaysInTheNamespace(t *testing.T) {
	b, err := cniConfig(configValues{Dir: "/d", PodCIDR: "10.244.3.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"ipMasq": false`, `"subnet": "10.244.3.0/24"`, `"dataDir": "/d/cni-ipam"`} {
		if !strings.Contains(s, want) {
			t.Errorf("CNI configuration lacks %s:\n%s", want, s)
		}
	}
}

// TestContainerdConfigRestrictsOOMScore pins what runc needs on machines without
// CAP_SYS_RESOURCE, and the pinned local pause image.
func TestContainerdConfigRestrictsOOMScore(t *testing.T) {
	b, err := containerdConfig(configValues{Dir: "/d", BinDir: "/bin", ContainerdSocket: "/d/c.sock", PauseImage: PauseImage})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"restrict_oom_score_adj = true", `sandbox = "` + PauseImage + `"`, `address = "/d/c.sock"`, `BinaryName = "/bin/runc"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("containerd configuration lacks %s", want)
		}
	}
}

// TestNamespaceKubeConfig points clients in the node's namespace at the relay while they keep
// verifying the API server's certificate under its own name.
func TestNamespaceKubeConfig(t *testing.T) {
	in := []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:37155", certificate-authority-data: "Zm9v"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
users:
- name: u
  user: {token: t}
`)
	out, target, err := namespaceKubeConfig(in, "10.244.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	if target != "127.0.0.1:37155" {
		t.Errorf("target = %s", target)
	}
	cfg, err := clientcmd.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Clusters["c"]; c.Server != "https://10.244.0.1:6443" || c.TLSServerName != "127.0.0.1" {
		t.Errorf("cluster = %s (TLS name %q)", c.Server, c.TLSServerName)
	}
}

// TestOverlaps keeps slots off subnets the machine uses.
func TestOverlaps(t *testing.T) {
	_, block, _ := net.ParseCIDR("10.244.4.0/23")
	_, wide, _ := net.ParseCIDR("10.0.0.0/8")
	_, other, _ := net.ParseCIDR("192.0.2.0/24")
	if !overlaps(block, []*net.IPNet{wide}) {
		t.Error("a /23 inside a machine's /8 must overlap")
	}
	if overlaps(block, []*net.IPNet{other}) {
		t.Error("unrelated subnets must not overlap")
	}
	if n := networkFor(3); n.HostIP != "10.244.6.1" || n.NodeIP != "10.244.6.2" || n.PodCIDR != "10.244.7.0/24" || n.Netns != "siteops-node-3" {
		t.Errorf("slot 3 = %+v", n)
	}
}
