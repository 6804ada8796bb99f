package node

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// cgroupMounts lists the mount points of every cgroup hierarchy (v1 controllers and, on hybrid
// machines, the cgroup2 one where runc also creates a container's cgroup).
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ID parent major:minor root mountpoint options... - fstype source superoptions
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		fields, typ := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(typ) < 1 || (typ[0] != "cgroup" && typ[0] != "cgroup2") {
			continue
		}
		out = append(out, fields[4])
	}
	return out, s.Err()
}

// createCgroupRoot creates root in every v1 hierarchy (kubelet checks it exists in each).
func createCgroupRoot(root string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := os.MkdirAll(filepath.Join(m, root), 0o755); err != nil {
			return fmt.Errorf("create the node's cgroup: %w", err)
		}
	}
	return nil
}

// removeCgroupRoot removes root and everything under it in every hierarchy, deepest first,
// retrying while the last killed processes leave them.
func removeCgroupRoot(root string, timeout time.Duration) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		var errs []error
		for _, m := range mounts {
			if err := removeTree(filepath.Join(m, root)); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 || time.Now().After(deadline) {
			return errors.Join(errs...)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeTree rmdirs a cgroup folder and its children (a cgroup folder's files go with it).
func removeTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("walk cgroup %s: %w", dir, err)
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove cgroup %s: %w", d, err)
		}
	}
	return nil
}

// cgroupLeftovers lists the hierarchies where root still exists.
func cgroupLeftovers(root string) []string {
	mounts, _ := cgroupMounts()
	var out []string
	for _, m := range mounts {
		if exists(filepath.Join(m, root)) {
			out = append(out, "cgroup "+filepath.Join(m, root))
		}
	}
	return out
}
