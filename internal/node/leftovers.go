package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func objectMeta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }

// namespacePIDs lists the processes in the node's mount namespace (its kubelet, containerd,
// shims and PID 1; containers have mount namespaces of their own and are found by cgroup).
func (n *Node) namespacePIDs() []int {
	if n.mountNS == "" {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "mnt")); err == nil && ns == n.mountNS {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupPIDs lists the processes in the node's cgroups (its pods' containers).
func (n *Node) cgroupPIDs() []int {
	mounts, _ := cgroupMounts()
	var out []int
	for _, m := range mounts {
		// A folder that vanishes during the walk (a pod's cgroup being removed) is skipped.
		_ = filepath.WalkDir(filepath.Join(m, n.cgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil //nolint:nilerr // see above
			}
			if d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// waitProcessesGone waits until no process of the node is left, killing stragglers (there
// should be none: the kernel ends a PID namespace's processes with its PID 1).
func (n *Node) waitProcessesGone(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := append(n.namespacePIDs(), n.cgroupPIDs()...)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node processes still running after %s: %v", timeout, pids)
		}
		for _, p := range pids {
			_ = killPID(p)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func killPID(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// Leftovers describes whatever of the node still exists on the machine: processes, its mount
// namespace, cgroups, network namespace and veth. Empty after Stop.
func (n *Node) Leftovers() []string {
	var out []string
	for _, p := range n.namespacePIDs() {
		out = append(out, fmt.Sprintf("process %d in the node's mount namespace", p))
	}
	for _, p := range n.cgroupPIDs() {
		out = append(out, fmt.Sprintf("process %d in the node's cgroups", p))
	}
	out = append(out, cgroupLeftovers(n.cgroupRoot)...)
	out = append(out, n.net.leftovers()...)
	if exists(filepath.Join(lockDir, strconv.Itoa(n.net.Slot)+".lock")) {
		out = append(out, "slot lock "+filepath.Join(lockDir, strconv.Itoa(n.net.Slot)+".lock"))
	}
	return out
}

// errNoMountNS is returned when the holder never left the machine's mount namespace.
var errNoMountNS = errors.New("the node's holder did not enter a mount namespace of its own")
