// Package node runs a real Kubernetes node on this machine for development and tests: kubelet,
// containerd, runc, the CNI bridge, kube-proxy and CoreDNS, joined to a running kube-apiserver,
// and isolated from the machine. Its processes live in a PID and mount namespace of their own (tmpfs over /run,
// /var/lib and /var/log, kubelet's kernel tunables read from files), the pods' network in a
// network namespace reached from the machine only through a veth pair, and its pods' cgroups
// under one cgroup of its own. Stop (or the death of the process that started it) ends every
// process; Stop also removes the cgroups and the network namespace.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/servers"
)

// Binaries are the programs a node runs, looked up in Options.BinDir (`make node-tools`).
var Binaries = []string{"kubelet", "kube-proxy", "coredns", "containerd", "containerd-shim-runc-v2", "runc", "ctr", "pause",
	"cni/bridge", "cni/host-local", "cni/loopback"}

// Tools are the machine's programs the node uses (util-linux, iproute2, procps).
var Tools = []string{"unshare", "nsenter", "ip", "mount", "sysctl"}

// Options configures Start.
type Options struct {
	// KubeConfig is a kubeconfig (content) the kubelet uses to reach the API server; an admin
	// one is fine on a development machine.
	KubeConfig []byte
	// Dir is the node's state folder: configuration, logs, sockets. Unix socket paths are
	// limited to 107 bytes, so keep it short.
	Dir string
	// BinDir holds Binaries (default: servers.AssetsDir()).
	BinDir string
	// Name is the Node's name (default: siteops-node-<slot>).
	Name string
	// Images are docker-archive tarballs imported into containerd before the node registers.
	Images []string
	// APIAccess, when set, lets the API server's client certificate call the kubelet (logs,
	// exec, port-forward); the API server must run with APIAccess.Flags().
	APIAccess *APIAccess
	// CABundle is shipped in the pause image (default: the machine's bundle).
	CABundle string
	// ReadyTimeout bounds the wait for the Node to be Ready (default 90 s).
	ReadyTimeout time.Duration
}

// Node is a running node.
type Node struct {
	// Name is the Node object's name.
	Name string
	// IP is the node's address (kubelet listens there; the machine's end of the veth pair);
	// PodCIDR is its pods' subnet, routed from the machine.
	IP, PodCIDR string
	// Netns is the node's network namespace (`ip netns` name), NetnsIP its end of the veth pair,
	// where NodePort Services answer.
	Netns, NetnsIP string
	// Dir is the state folder, holding containerd.log and kubelet.log.
	Dir string

	readyTimeout time.Duration
	binDir       string
	net          network
	cgroupRoot   string
	client       client.Client
	forwarder    *forwarder

	mu      sync.Mutex
	holder  *exec.Cmd
	mountNS string
	done    chan struct{}
	stopped bool
}

// Start brings a node up and waits until its Node is Ready. On failure it leaves nothing
// behind and says which log to read.
func Start(ctx context.Context, o Options) (_ *Node, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("a node needs root (namespaces, mounts, cgroups)")
	}
	if o.BinDir == "" {
		o.BinDir = servers.AssetsDir()
	}
	if err := CheckBinaries(o.BinDir); err != nil {
		return nil, err
	}
	if o.Dir == "" || len(o.KubeConfig) == 0 {
		return nil, errors.New("node: Dir and KubeConfig are required")
	}
	if o.CABundle == "" {
		o.CABundle = "/etc/ssl/certs/ca-certificates.crt"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 90 * time.Second
	}
	restCfg, err := clientcmd.RESTConfigFromKubeConfig(o.KubeConfig)
	if err != nil {
		return nil, fmt.Errorf("node kubeconfig: %w", err)
	}
	c, err := client.New(restCfg, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("node: API client: %w", err)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{dir, filepath.Join(dir, "cni"), filepath.Join(dir, "sysctl")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create the node's state folder: %w", err)
		}
	}

	netw, err := setupNetwork(ctx)
	if err != nil {
		return nil, err
	}
	n := &Node{Name: o.Name, IP: netw.HostIP, PodCIDR: netw.PodCIDR, Netns: netw.Netns, NetnsIP: netw.NodeIP,
		Dir: dir, readyTimeout: o.ReadyTimeout, binDir: o.BinDir, net: netw,
		cgroupRoot: "/" + netw.Netns, client: c, done: make(chan struct{})}
	if n.Name == "" {
		n.Name = netw.Netns
	}
	defer func() {
		if err != nil {
			_ = n.Stop(context.WithoutCancel(ctx))
		}
	}()
	if err := createCgroupRoot(n.cgroupRoot); err != nil {
		return nil, err
	}
	nsKubeConfig, apiAddr, err := namespaceKubeConfig(o.KubeConfig, fmt.Sprintf("%s:%d", netw.HostIP, APIPort))
	if err != nil {
		return nil, err
	}
	if n.forwarder, err = startForwarder(fmt.Sprintf("%s:%d", netw.HostIP, APIPort), apiAddr); err != nil {
		return nil, err
	}
	if err := n.writeConfig(o, nsKubeConfig); err != nil {
		return nil, err
	}
	pause, err := buildPauseImage(o.BinDir, dir, o.CABundle)
	if err != nil {
		return nil, err
	}
	if err := n.startHolder(); err != nil {
		return nil, err
	}
	if err := n.waitFor(ctx, 30*time.Second, "containerd", func(context.Context) error {
		if !exists(n.containerdSocket()) {
			return errors.New("no socket yet")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := n.importImages(ctx, append([]string{pause}, o.Images...)...); err != nil {
		return nil, err
	}
	// The holder starts kubelet once this file exists: the pause image is in place by then.
	if err := os.WriteFile(filepath.Join(dir, "start-kubelet"), nil, 0o600); err != nil {
		return nil, err
	}
	if err := n.waitFor(ctx, o.ReadyTimeout, "kubelet", n.ready); err != nil {
		return nil, err
	}
	if err := n.publishAPIServer(ctx); err != nil {
		return nil, err
	}
	if err := n.waitFor(ctx, 30*time.Second, "coredns", n.dnsReady); err != nil {
		return nil, err
	}
	return n, nil
}

// CheckBinaries reports the first of Binaries missing from binDir, and the first of Tools
// missing from PATH, with what to run.
func CheckBinaries(binDir string) error {
	for _, b := range Binaries {
		if st, err := os.Stat(filepath.Join(binDir, b)); err != nil || st.IsDir() {
			return fmt.Errorf("%s not found in %s: run `make node-tools`", b, binDir)
		}
	}
	for _, t := range Tools {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%s not found on PATH: install Debian's util-linux, iproute2 and procps", t)
		}
	}
	return nil
}

func (n *Node) containerdSocket() string { return filepath.Join(n.Dir, "containerd.sock") }

// KubeletLog is the kubelet's log file.
func (n *Node) KubeletLog() string { return filepath.Join(n.Dir, "kubelet.log") }

// ContainerdLog is containerd's log file.
func (n *Node) ContainerdLog() string { return filepath.Join(n.Dir, "containerd.log") }

// AllowPlainHTTPRegistry lets the node pull from the registry at hostPort over plain HTTP, as
// a containerd hosts.toml does on any node (a registry on the machine, for the tests that push
// images and have the node pull them).
func (n *Node) AllowPlainHTTPRegistry(hostPort string) error {
	dir := filepath.Join(n.Dir, "certs.d", hostPort)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("registry settings for %s: %w", hostPort, err)
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+hostPort, "http://"+hostPort)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		return fmt.Errorf("registry settings for %s: %w", hostPort, err)
	}
	return nil
}

// Done is closed when the node's processes have exited (after Stop, or when kubelet or
// containerd died).
func (n *Node) Done() <-chan struct{} { return n.done }

func (n *Node) writeConfig(o Options, nsKubeConfig []byte) error {
	v := configValues{Dir: n.Dir, BinDir: o.BinDir, NodeIP: n.net.HostIP, NamespaceIP: n.net.NodeIP, PodCIDR: n.net.PodCIDR,
		CgroupRoot: n.cgroupRoot, ContainerdSocket: n.containerdSocket(), PauseImage: PauseImage}
	if o.APIAccess != nil {
		v.ClientCAFile = o.APIAccess.CAFile
	}
	kubelet, err := kubeletConfig(v)
	if err != nil {
		return err
	}
	containerd, err := containerdConfig(v)
	if err != nil {
		return err
	}
	cni, err := cniConfig(v)
	if err != nil {
		return err
	}
	proxy, err := kubeProxyConfig(v, n.Name)
	if err != nil {
		return err
	}
	nsCfg, err := clientcmd.Load(nsKubeConfig)
	if err != nil {
		return err
	}
	dns, err := corefile(n.Dir, n.net.NodeIP, nsCfg.CurrentContext)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"kubelet.yaml":            kubelet,
		"containerd.toml":         containerd,
		"cni/10-siteops.conflist": cni,
		"kubeconfig":              o.KubeConfig,
		"kube-proxy.yaml":         proxy,
		"kube-proxy.kubeconfig":   nsKubeConfig,
		"Corefile":                dns,
		// For dnsPolicy Default: nothing, rather than the machine's resolver.
		"resolv.conf": []byte("# siteops development node: no resolver\n"),
	}
	for _, s := range kubeletSysctls {
		files["sysctl/"+strings.ReplaceAll(s.Path, "/", ".")] = []byte(s.Value + "\n")
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(n.Dir, name), b, 0o600); err != nil {
			return fmt.Errorf("write the node's %s: %w", name, err)
		}
	}
	return nil
}

// holderScript runs as PID 1 of the node's PID namespace, in its private mount namespace: it
// lays the tmpfs and the kernel tunables' files over the machine's, starts containerd in the
// node's network namespace (fd 3) with kube-proxy and CoreDNS, then kubelet once
// start-kubelet exists. When any of them exits it exits, and the kernel ends every process of
// the namespace with it; but a kubelet that exits while restart-kubelet exists (RestartKubelet)
// is started again.
const holderScript = `set -eu
mount -t tmpfs -o mode=0755 siteops-node /run
mount -t tmpfs -o mode=0755 siteops-node /var/lib
mount -t tmpfs -o mode=0755 siteops-node /var/log
for f in "$NODE_DIR"/sysctl/*; do
  mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)"
done
export PATH="$NODE_BIN:$PATH"
nsenter --net=/proc/self/fd/3 -- containerd --config "$NODE_DIR/containerd.toml" >>"$NODE_DIR/containerd.log" 2>&1 &
nsenter --net=/proc/self/fd/3 -- kube-proxy --config="$NODE_DIR/kube-proxy.yaml" --v=2 >>"$NODE_DIR/kube-proxy.log" 2>&1 &
nsenter --net=/proc/self/fd/3 -- coredns -conf "$NODE_DIR/Corefile" >>"$NODE_DIR/coredns.log" 2>&1 &
exec 3<&-
start_kubelet() {
  kubelet --config="$NODE_DIR/kubelet.yaml" --kubeconfig="$NODE_DIR/kubeconfig" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=2 >>"$NODE_DIR/kubelet.log" 2>&1 &
  kubelet_pid=$!
}
while [ ! -e "$NODE_DIR/start-kubelet" ]; do sleep 0.1; done
start_kubelet
while wait -n -p exited; status=$?; [ "${exited:-}" = "$kubelet_pid" ] && [ -e "$NODE_DIR/restart-kubelet" ]; do
  rm -f "$NODE_DIR/restart-kubelet"
  echo "siteops node: kubelet exited ($status) to restart; starting it again" >&2
  start_kubelet
done
echo "siteops node: a component exited ($status); stopping the node" >&2
`

func (n *Node) startHolder() error {
	netns, err := os.Open(n.net.NetnsPath())
	if err != nil {
		return fmt.Errorf("open the node's network namespace: %w", err)
	}
	defer netns.Close()
	logFile, err := os.OpenFile(filepath.Join(n.Dir, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc",
		"--kill-child=SIGKILL", "--", "bash", "-c", holderScript)
	cmd.Env = append(os.Environ(), "NODE_DIR="+n.Dir, "NODE_BIN="+n.binDir, "NODE_NAME="+n.Name, "NODE_IP="+n.net.HostIP)
	cmd.Dir = n.Dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{netns}
	// If the process that started the node dies, unshare dies, and with it (--kill-child) the
	// namespace's PID 1 and so every process of the node.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the node: %w", err)
	}
	n.mu.Lock()
	n.holder = cmd
	n.mu.Unlock()
	go func() { _ = cmd.Wait(); close(n.done) }()
	// unshare leaves the machine's mount namespace a moment after it starts; remember the new
	// one, to find the node's processes by it.
	own, _ := os.Readlink("/proc/self/ns/mnt")
	for range 100 {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
		if err == nil && ns != own {
			n.mountNS = ns
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errNoMountNS
}

// waitFor polls check until it passes, failing early when the node's processes exit.
func (n *Node) waitFor(ctx context.Context, timeout time.Duration, what string, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(attempt)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-n.done:
			return fmt.Errorf("the node stopped while waiting for %s: see %s, %s and %s", what,
				filepath.Join(n.Dir, "node.log"), n.ContainerdLog(), n.KubeletLog())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w (log: %s)", what, timeout, last, filepath.Join(n.Dir, what+".log"))
		}
	}
}

func (n *Node) ready(ctx context.Context) error {
	var node corev1.Node
	if err := n.client.Get(ctx, client.ObjectKey{Name: n.Name}, &node); err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s: %s", c.Reason, c.Message)
		}
	}
	return errors.New("node has no Ready condition yet")
}

// Stop ends every process of the node, removes its cgroups, network namespace and veth pair,
// and deletes the Node object. It is safe to call more than once.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	holder, already := n.holder, n.stopped
	n.stopped = true
	n.mu.Unlock()
	if already {
		return nil
	}
	var errs []error
	if holder != nil {
		_ = holder.Process.Kill()
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			errs = append(errs, errors.New("the node's holder process did not exit"))
		}
		if err := n.waitProcessesGone(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if n.forwarder != nil {
		n.forwarder.close()
	}
	if err := removeCgroupRoot(n.cgroupRoot, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := n.net.teardown(ctx); err != nil {
		errs = append(errs, err)
	}
	if n.client != nil {
		if err := n.unpublishAPIServer(ctx); err != nil {
			errs = append(errs, err)
		}
		err := n.client.Delete(ctx, &corev1.Node{ObjectMeta: objectMeta(n.Name)})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete Node %s: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}

// APIServerSlice names the EndpointSlice of the `kubernetes` Service that a node publishes.
// There is one per API server, so a node killed without Stop leaves no dead endpoint once the
// next node starts; the pods of one node only reach that node's relay, so an API server serves
// one node at a time.
const APIServerSlice = "kubernetes-siteops-node"

// apiServerSlice is the EndpointSlice of the `kubernetes` Service pointing at the relay on the
// node's address, so pods reach the API server at the Service's ClusterIP.
func (n *Node) apiServerSlice() *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: APIServerSlice, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "siteops-node"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{n.IP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](APIPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}

// publishAPIServer creates (or replaces) apiServerSlice.
func (n *Node) publishAPIServer(ctx context.Context) error {
	s := n.apiServerSlice()
	err := n.client.Create(ctx, s)
	if apierrors.IsAlreadyExists(err) {
		var old discoveryv1.EndpointSlice
		if err = n.client.Get(ctx, client.ObjectKeyFromObject(s), &old); err == nil {
			s.ResourceVersion = old.ResourceVersion
			err = n.client.Update(ctx, s)
		}
	}
	if err != nil {
		return fmt.Errorf("publish the API server's endpoint for pods: %w", err)
	}
	return nil
}

// unpublishAPIServer deletes apiServerSlice while it still points at this node.
func (n *Node) unpublishAPIServer(ctx context.Context) error {
	var s discoveryv1.EndpointSlice
	err := n.client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: APIServerSlice}, &s)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the kubernetes Service's EndpointSlice: %w", err)
	}
	if len(s.Endpoints) == 0 || len(s.Endpoints[0].Addresses) == 0 || s.Endpoints[0].Addresses[0] != n.IP {
		return nil
	}
	err = n.client.Delete(ctx, &s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete the kubernetes Service's EndpointSlice: %w", err)
	}
	return nil
}

// dnsReady asks CoreDNS's ready plugin whether it has loaded the cluster's Services.
func (n *Node) dnsReady(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(n.NetnsIP, "8181")+"/ready", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CoreDNS not ready: %s", resp.Status)
	}
	return nil
}
