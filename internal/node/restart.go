package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RestartKubelet is a fault for tests: it stops the node's kubelet (SIGTERM, SIGKILL after
// 10 s) and the node starts it again with the same configuration; it returns once the new
// kubelet has reported the Node Ready. containerd keeps the pods' containers running meanwhile
// and the new kubelet adopts them, so running pods keep their containers and restart counts
// (a pod with a readiness probe may be reported not ready until the probe passes again).
func (n *Node) RestartKubelet(ctx context.Context) error {
	n.mu.Lock()
	stopped := n.stopped
	n.mu.Unlock()
	if stopped {
		return errors.New("restart kubelet: the node is stopped")
	}
	old, err := n.kubeletPID()
	if err != nil {
		return err
	}
	// The holder starts a kubelet that exits while this file exists again, and removes it.
	marker := filepath.Join(n.Dir, "restart-kubelet")
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		return fmt.Errorf("restart kubelet: %w", err)
	}
	if err := syscall.Kill(old, syscall.SIGTERM); err != nil {
		_ = os.Remove(marker)
		return fmt.Errorf("stop kubelet (pid %d): %w", old, err)
	}
	killAt := time.Now().Add(10 * time.Second)
	var restarted time.Time
	if err := n.waitFor(ctx, 30*time.Second, "kubelet", func(context.Context) error {
		pid, err := n.kubeletPID()
		if err == nil && pid != old {
			restarted = time.Now()
			return nil
		}
		if time.Now().After(killAt) {
			_ = syscall.Kill(old, syscall.SIGKILL)
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("kubelet (pid %d) still running", old)
	}); err != nil {
		return fmt.Errorf("restart kubelet: %w", err)
	}
	// Node status carries whole seconds: a heartbeat later than the second the new kubelet was
	// seen in was posted after the old one had exited.
	since := restarted.Truncate(time.Second)
	if err := n.waitFor(ctx, n.readyTimeout, "kubelet", func(ctx context.Context) error {
		return n.readySince(ctx, since)
	}); err != nil {
		return fmt.Errorf("restart kubelet: %w", err)
	}
	return nil
}

// kubeletPID finds the kubelet among the processes of the node's mount namespace.
func (n *Node) kubeletPID() (int, error) {
	for _, pid := range n.namespacePIDs() {
		comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
		if err == nil && strings.TrimSpace(string(comm)) == "kubelet" {
			return pid, nil
		}
	}
	return 0, errors.New("no kubelet process in the node")
}

// readySince reports nil once the Node is Ready by a heartbeat later than since.
func (n *Node) readySince(ctx context.Context, since time.Time) error {
	var node corev1.Node
	if err := n.client.Get(ctx, client.ObjectKey{Name: n.Name}, &node); err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if !c.LastHeartbeatTime.After(since) {
			return fmt.Errorf("no Ready heartbeat from the new kubelet yet (last %s)", c.LastHeartbeatTime.Format(time.RFC3339))
		}
		if c.Status != corev1.ConditionTrue {
			return fmt.Errorf("node %s: %s", c.Reason, c.Message)
		}
		return nil
	}
	return errors.New("node has no Ready condition")
}
