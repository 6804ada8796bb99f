package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The freezer cgroup's states (cgroup v1 freezer.state).
const (
	freezerFrozen = "FROZEN"
	freezerThawed = "THAWED"
)

// FreezePod stops every process of the pod with the v1 freezer, as a pod that hangs would: its
// sockets still accept connections, but nothing answers them, its probes included. It returns
// once the kernel says the pod is frozen; thaw lets it run again.
func (n *Node) FreezePod(uid types.UID) (thaw func() error, err error) {
	dir, err := n.podFreezer(uid)
	if err != nil {
		return nil, err
	}
	if err := setFreezer(dir, freezerFrozen, 10*time.Second); err != nil {
		_ = setFreezer(dir, freezerThawed, 10*time.Second)
		return nil, fmt.Errorf("freeze pod %s: %w", uid, err)
	}
	return func() error {
		if err := setFreezer(dir, freezerThawed, 10*time.Second); err != nil {
			return fmt.Errorf("thaw pod %s: %w", uid, err)
		}
		return nil
	}, nil
}

// podFreezer is the pod's cgroup in the freezer hierarchy (kubelet's cgroupfs driver names it
// pod<uid>, under its QoS class's cgroup).
func (n *Node) podFreezer(uid types.UID) (string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return "", err
	}
	want := "pod" + string(uid)
	for _, m := range mounts {
		if !strings.Contains(filepath.Base(m), "freezer") {
			continue
		}
		var found string
		_ = filepath.WalkDir(filepath.Join(m, n.cgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err != nil || found != "" {
				return filepath.SkipDir
			}
			if d.IsDir() && d.Name() == want {
				found = p
				return filepath.SkipAll
			}
			return nil
		})
		if found != "" {
			return found, nil
		}
	}
	return "", fmt.Errorf("no freezer cgroup for pod %s under %s: is it running on this node?", uid, n.cgroupRoot)
}

// setFreezer writes state to the cgroup's freezer.state and waits until it reads back so
// (freezing passes through FREEZING while the tasks stop).
func setFreezer(dir, state string, timeout time.Duration) error {
	file := filepath.Join(dir, "freezer.state")
	if err := os.WriteFile(file, []byte(state), 0o644); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(string(b)); got == state {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("%s is %s after %s, want %s", file, got, timeout, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
