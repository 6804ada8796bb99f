package inject

import (
	"fmt"
	"sort"
	"strings"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// Values of the deco.sites/decofile-inject annotation with a special meaning; any other value
// names a Decofile.
const (
	// InjectByDeploymentID picks the Decofile whose deploymentId (or name) equals the workload's
	// app.deco/deploymentId label.
	InjectByDeploymentID = "true"
	// InjectDefault picks decofile-<site>-main, <site> being the namespace without "sites-".
	InjectDefault = "default"
)

// DefaultDecofileName is the Decofile "default" resolves to in namespace: decofile-<site>-main,
// where <site> is the namespace with a leading "sites-" removed.
func DefaultDecofileName(namespace string) string {
	return "decofile-" + strings.TrimPrefix(namespace, "sites-") + "-main"
}

// ByDeploymentID picks, among the Decofiles of a namespace, the one whose deploymentId (or name)
// equals id. With several matches the one holding the deploymentId wins — the oldest by
// creationTimestamp, then name, the only one the delivery controller delivers (the others are
// DeploymentIDConflict) — and a warning says so.
func ByDeploymentID(items []decov1.Decofile, id string) (*decov1.Decofile, []string) {
	var matches []*decov1.Decofile
	for i := range items {
		if items[i].DeploymentIDOrName() == id {
			matches = append(matches, &items[i])
		}
	}
	if len(matches) == 0 {
		return nil, nil
	}
	sort.Slice(matches, func(i, j int) bool { return matches[i].ClaimsBefore(matches[j]) })
	if len(matches) == 1 {
		return matches[0], nil
	}
	names := make([]string, len(matches))
	for i, m := range matches {
		names[i] = m.Name
	}
	return matches[0], []string{fmt.Sprintf("several Decofiles have deploymentId %q (%s): using %q", id, strings.Join(names, ", "), matches[0].Name)}
}
