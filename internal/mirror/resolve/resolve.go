// Package resolve turns watch rules into concrete resources through API discovery: versions
// default to each group's preferred one, and resources that cannot be listed and watched,
// subresources, Secrets and noisy types are left out with a reason.
package resolve

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
)

// Resource is one resolved resource to watch.
type Resource struct {
	GVR        schema.GroupVersionResource
	Kind       string
	Namespaced bool
	// Operations are the event kinds to mirror (CREATE, UPDATE, DELETE).
	Operations []mirrorv1alpha1.Operation
}

// APIVersion is the resource's group/version as written in manifests.
func (r Resource) APIVersion() string { return r.GVR.GroupVersion().String() }

// Result is the outcome of resolving rules.
type Result struct {
	// Resources are sorted by group and resource.
	Resources []Resource
	// Excluded are resources the rules matched that are not mirrored.
	Excluded []mirrorv1alpha1.ExcludedResource
}

// Reasons for excluded resources.
const (
	ReasonSecret = "Secrets are never written in plaintext (the GitTarget's spec.secrets can write them encrypted)"
	ReasonNoisy  = "noisy type (changes constantly or is owned by a controller)"
)

// noisy are resources excluded by default: they change constantly or are pure controller output.
var noisy = map[schema.GroupResource]bool{
	{Resource: "events"}:                                    true,
	{Group: "events.k8s.io", Resource: "events"}:            true,
	{Group: "coordination.k8s.io", Resource: "leases"}:      true,
	{Resource: "endpoints"}:                                 true,
	{Group: "discovery.k8s.io", Resource: "endpointslices"}: true,
	{Resource: "pods"}:                                      true,
	{Group: "apps", Resource: "controllerrevisions"}:        true,
	{Group: "batch", Resource: "jobs"}:                      true,
}

// Discover reads the server's groups and resources. A partial discovery failure (one aggregated
// API down) still returns what was found.
func Discover(d discovery.DiscoveryInterface) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	groups, lists, err := d.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, nil, fmt.Errorf("discover API resources: %w", err)
	}
	return groups, lists, nil
}

// Rules resolves rules against discovered groups and resources. namespaced selects namespaced
// resources (WatchRule) or cluster-scoped ones (ClusterWatchRule).
func Rules(groups []*metav1.APIGroup, lists []*metav1.APIResourceList, rules []mirrorv1alpha1.ResourceRule, namespaced bool) (Result, error) {
	return RulesFor(groups, lists, rules, namespaced, false)
}

// RulesFor is Rules for a GitTarget that writes Secrets encrypted (secrets true), whose rules
// resolve Secrets like any other resource.
func RulesFor(groups []*metav1.APIGroup, lists []*metav1.APIResourceList, rules []mirrorv1alpha1.ResourceRule, namespaced, secrets bool) (Result, error) {
	preferred := map[string]string{}
	for _, g := range groups {
		preferred[g.Name] = g.PreferredVersion.Version
	}
	chosen := map[schema.GroupResource]*Resource{}
	excluded := map[string]string{}
	var errs []error
	for i, rule := range rules {
		matched := false
		for _, list := range lists {
			gv, err := schema.ParseGroupVersion(list.GroupVersion)
			if err != nil {
				continue
			}
			if !matchGroup(rule.APIGroups, gv.Group) || !matchVersion(rule.APIVersions, gv, preferred) {
				continue
			}
			for _, r := range list.APIResources {
				if r.Namespaced != namespaced || !matchName(rule.Resources, r.Name) || containsSlash(r.Name) {
					continue
				}
				gr := schema.GroupResource{Group: gv.Group, Resource: r.Name}
				if !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch") {
					if explicit(rule.Resources, r.Name) {
						excluded[grString(gr)] = "cannot be listed and watched"
					}
					continue
				}
				matched = true
				switch {
				case gr == schema.GroupResource{Resource: "secrets"} && !secrets:
					excluded[grString(gr)] = ReasonSecret
					continue
				case noisy[gr]:
					excluded[grString(gr)] = ReasonNoisy
					continue
				}
				res := chosen[gr]
				if res == nil {
					res = &Resource{GVR: gv.WithResource(r.Name), Kind: r.Kind, Namespaced: r.Namespaced}
					chosen[gr] = res
				}
				res.Operations = mergeOps(res.Operations, rule.Operations)
			}
		}
		if !matched {
			errs = append(errs, fmt.Errorf("rule %d (groups %v, resources %v) matches no %s resource that can be listed and watched", i, rule.APIGroups, rule.Resources, scopeName(namespaced)))
		}
	}
	out := Result{}
	for _, r := range chosen {
		slices.Sort(r.Operations)
		out.Resources = append(out.Resources, *r)
	}
	sort.Slice(out.Resources, func(i, j int) bool {
		a, b := out.Resources[i].GVR, out.Resources[j].GVR
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return a.Resource < b.Resource
	})
	for r, reason := range excluded {
		out.Excluded = append(out.Excluded, mirrorv1alpha1.ExcludedResource{Resource: r, Reason: reason})
	}
	sort.Slice(out.Excluded, func(i, j int) bool { return out.Excluded[i].Resource < out.Excluded[j].Resource })
	return out, errors.Join(errs...)
}

func scopeName(namespaced bool) string {
	if namespaced {
		return "namespaced"
	}
	return "cluster-scoped"
}

func grString(gr schema.GroupResource) string { return gr.String() }

func containsSlash(s string) bool {
	for i := range len(s) {
		if s[i] == '/' {
			return true
		}
	}
	return false
}

func matchGroup(groups []string, g string) bool {
	return slices.Contains(groups, "*") || slices.Contains(groups, g)
}

func matchVersion(versions []string, gv schema.GroupVersion, preferred map[string]string) bool {
	if len(versions) == 0 {
		p, ok := preferred[gv.Group]
		return !ok || p == gv.Version
	}
	return slices.Contains(versions, "*") || slices.Contains(versions, gv.Version)
}

func matchName(names []string, n string) bool {
	return slices.Contains(names, "*") || slices.Contains(names, n)
}

func explicit(names []string, n string) bool { return slices.Contains(names, n) }

func mergeOps(have, add []mirrorv1alpha1.Operation) []mirrorv1alpha1.Operation {
	if len(add) == 0 || slices.Contains(add, mirrorv1alpha1.OperationAll) {
		add = []mirrorv1alpha1.Operation{mirrorv1alpha1.OperationCreate, mirrorv1alpha1.OperationUpdate, mirrorv1alpha1.OperationDelete}
	}
	for _, op := range add {
		if !slices.Contains(have, op) {
			have = append(have, op)
		}
	}
	return have
}
