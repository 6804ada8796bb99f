package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The node's addresses come from this range, used only inside the machine: slot i takes
// 10.244.(2i).0/30 for the veth pair (machine .1, node namespace .2) and 10.244.(2i+1).0/24
// for its pods. Nothing routes this range anywhere but into the node's namespace.
const (
	addrPrefix = "10.244."
	slots      = 120
	// netnsPrefix names the network namespaces (ip netns) and host veth ends the nodes create.
	netnsPrefix = "siteops-node-"
	vethPrefix  = "sonode"
)

// network is the node's network namespace and the veth pair that is its only way in.
type network struct {
	// Slot is the index the names and addresses derive from.
	Slot int
	// Netns is the `ip netns` name; HostLink the machine's end of the veth pair.
	Netns, HostLink string
	// HostIP is the machine's end (kubelet's node IP), NodeIP the namespace's end.
	HostIP, NodeIP string
	// PodCIDR is the pods' subnet, routed from the machine to NodeIP.
	PodCIDR string

	// lock is the slot's lock file, held (flock) while the node lives, so a slot whose lock is
	// free belongs to nobody, even if a killed node's namespace is still there.
	lock *os.File
}

// lockDir holds one lock file per slot in use.
const lockDir = "/run/siteops-node"

// claimSlot takes the slot's lock without waiting.
func claimSlot(slot int) (*os.File, error) {
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", lockDir, err)
	}
	p := filepath.Join(lockDir, strconv.Itoa(slot)+".lock")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	// The previous holder may have removed the file between our open and flock: then the lock
	// is on a dead file and proves nothing.
	var held, named syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &held) != nil || syscall.Stat(p, &named) != nil || held.Ino != named.Ino {
		f.Close()
		return nil, errors.New("slot lock file replaced")
	}
	return f, nil
}

// release removes and unlocks the slot's lock file.
func (n *network) release() {
	if n.lock == nil {
		return
	}
	_ = os.Remove(n.lock.Name())
	_ = n.lock.Close()
	n.lock = nil
}

// removeStale deletes a dead node's namespace, veth and cgroups in this slot.
func (n network) removeStale(ctx context.Context) error {
	if err := n.removeLinks(ctx); err != nil {
		return err
	}
	return removeCgroupRoot("/"+n.Netns, 5*time.Second)
}

// Sweep removes what nodes killed without Stop left behind (their processes die with them; their
// network namespaces, veth pairs and cgroups stay). Slots of running nodes are left alone.
func Sweep(ctx context.Context) error {
	var errs []error
	for slot := range slots {
		n := networkFor(slot)
		if !exists(n.NetnsPath()) && !exists(filepath.Join(lockDir, strconv.Itoa(slot)+".lock")) && len(cgroupLeftovers("/"+n.Netns)) == 0 {
			continue
		}
		lock, err := claimSlot(slot)
		if err != nil {
			continue
		}
		n.lock = lock
		if err := n.removeStale(ctx); err != nil {
			errs = append(errs, err)
		}
		n.release()
	}
	return errors.Join(errs...)
}

func networkFor(slot int) network {
	return network{
		Slot:     slot,
		Netns:    fmt.Sprintf("%s%d", netnsPrefix, slot),
		HostLink: fmt.Sprintf("%s%d", vethPrefix, slot),
		HostIP:   fmt.Sprintf("%s%d.1", addrPrefix, 2*slot),
		NodeIP:   fmt.Sprintf("%s%d.2", addrPrefix, 2*slot),
		PodCIDR:  fmt.Sprintf("%s%d.0/24", addrPrefix, 2*slot+1),
	}
}

// NetnsPath is where `ip netns` keeps the namespace.
func (n network) NetnsPath() string { return "/run/netns/" + n.Netns }

// setupNetwork claims a free slot (the first whose namespace name is free and whose addresses
// no interface of the machine uses) and builds its namespace, veth pair, addresses and route.
func setupNetwork(ctx context.Context) (network, error) {
	used, err := usedSubnets()
	if err != nil {
		return network{}, err
	}
	start := rand.IntN(slots)
	for i := range slots {
		n := networkFor((start + i) % slots)
		_, block, _ := net.ParseCIDR(fmt.Sprintf("%s%d.0/23", addrPrefix, 2*n.Slot))
		if overlaps(block, used) {
			continue
		}
		lock, err := claimSlot(n.Slot)
		if err != nil {
			continue
		}
		n.lock = lock
		// Whatever still holds this slot was left by a node whose process died: remove it.
		if err := n.removeStale(ctx); err != nil {
			n.release()
			continue
		}
		if err := run(ctx, "ip", "netns", "add", n.Netns); err != nil {
			n.release()
			continue
		}
		if err := n.build(ctx); err != nil {
			_ = n.teardown(context.WithoutCancel(ctx))
			return network{}, err
		}
		return n, nil
	}
	return network{}, errors.New("no free node network slot in " + addrPrefix + "0.0/16: delete stale " + netnsPrefix + "* namespaces (ip netns list)")
}

func (n network) build(ctx context.Context) error {
	steps := [][]string{
		{"ip", "link", "add", n.HostLink, "type", "veth", "peer", "name", "veth0", "netns", n.Netns},
		{"ip", "addr", "add", n.HostIP + "/30", "dev", n.HostLink},
		{"ip", "link", "set", n.HostLink, "up"},
		{"ip", "-n", n.Netns, "link", "set", "lo", "up"},
		{"ip", "-n", n.Netns, "addr", "add", n.NodeIP + "/30", "dev", "veth0"},
		{"ip", "-n", n.Netns, "link", "set", "veth0", "up"},
		{"ip", "route", "add", n.PodCIDR, "via", n.NodeIP, "dev", n.HostLink},
		// The namespace's default route ends in a bridge without ports (this kernel has no
		// dummy device): Service addresses resolve (kube-proxy rewrites them after routing),
		// anything else is dropped there.
		{"ip", "-n", n.Netns, "link", "add", "nowhere0", "type", "bridge"},
		{"ip", "-n", n.Netns, "link", "set", "nowhere0", "up"},
		{"ip", "-n", n.Netns, "route", "add", "default", "dev", "nowhere0"},
		// Forwarding between the veth and the pod bridge, in the node's namespace only.
		{"ip", "netns", "exec", n.Netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("set up the node network: %w", err)
		}
	}
	return nil
}

// teardown deletes the namespace (with it the bridge, the veth pair and the route) and, should
// the veth outlive it, the machine's end; then it frees the slot.
func (n *network) teardown(ctx context.Context) error {
	err := n.removeLinks(ctx)
	if err == nil {
		n.release()
	}
	return err
}

func (n network) removeLinks(ctx context.Context) error {
	var errs []error
	if err := run(ctx, "ip", "netns", "delete", n.Netns); err != nil && exists(n.NetnsPath()) {
		errs = append(errs, err)
	}
	if _, err := net.InterfaceByName(n.HostLink); err == nil {
		// The kernel removes the pair itself once the namespace is gone, which may happen
		// between the check and the delete: a link that vanished meanwhile is no failure.
		if err := run(ctx, "ip", "link", "delete", n.HostLink); err != nil {
			if _, still := net.InterfaceByName(n.HostLink); still == nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// leftovers describes what of the network still exists.
func (n network) leftovers() []string {
	var out []string
	if exists(n.NetnsPath()) {
		out = append(out, "network namespace "+n.Netns)
	}
	if _, err := net.InterfaceByName(n.HostLink); err == nil {
		out = append(out, "interface "+n.HostLink)
	}
	return out
}

func usedSubnets() ([]*net.IPNet, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list the machine's addresses: %w", err)
	}
	var out []*net.IPNet
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n)
		}
	}
	return out, nil
}

func overlaps(block *net.IPNet, used []*net.IPNet) bool {
	for _, u := range used {
		if block.Contains(u.IP) || u.Contains(block.IP) {
			return true
		}
	}
	return false
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// run runs a command, returning its output in the error when it fails.
func run(ctx context.Context, name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
