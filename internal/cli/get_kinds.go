package cli

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/inspect"
	"github.com/siteops/siteops/internal/tenant/provision"
)

// listPageSize bounds each list response, so a cluster of many sites is read in pages rather
// than in one response the API server and the CLI must hold whole.
const listPageSize = 500

// getKind is one kind `siteops get` shows: how it is named on the command line, listed and
// summarised.
type getKind struct {
	kind    string
	names   []string
	newList func() client.ObjectList
	// summarize turns one listed item into a summary; ok is false for items the kind leaves out
	// (namespaces that are not tenants).
	summarize func(obj runtime.Object) (s inspect.Summary, ok bool)
	// clusterScoped kinds are listed whole and filtered by namespace name.
	clusterScoped bool
}

// getKinds are the kinds in the order `get all` shows them.
var getKinds = []getKind{
	{kind: inspect.KindDecofile, names: []string{"decofiles", "decofile", "df"},
		newList: func() client.ObjectList { return &decov1.DecofileList{} },
		summarize: func(o runtime.Object) (inspect.Summary, bool) {
			return inspect.Decofile(o.(*decov1.Decofile)), true
		}},
	{kind: inspect.KindTenant, names: []string{"tenants", "tenant"}, clusterScoped: true,
		newList: func() client.ObjectList { return &corev1.NamespaceList{} },
		summarize: func(o runtime.Object) (inspect.Summary, bool) {
			ns := o.(*corev1.Namespace)
			if !provision.Wanted(ns) && ns.Annotations[provision.AnnotationPasswordDigest] == "" {
				return inspect.Summary{}, false
			}
			return inspect.Tenant(ns), true
		}},
	{kind: inspect.KindGitTarget, names: []string{"gittargets", "gittarget", "gt"},
		newList: func() client.ObjectList { return &mirrorv1.GitTargetList{} },
		summarize: func(o runtime.Object) (inspect.Summary, bool) {
			return inspect.GitTarget(o.(*mirrorv1.GitTarget)), true
		}},
	{kind: inspect.KindWatchRule, names: []string{"watchrules", "watchrule", "wr"},
		newList: func() client.ObjectList { return &mirrorv1.WatchRuleList{} },
		summarize: func(o runtime.Object) (inspect.Summary, bool) {
			return inspect.WatchRule(o.(*mirrorv1.WatchRule)), true
		}},
}

// kindsNamed resolves the command-line kind ("all" is every kind).
func kindsNamed(name string) ([]getKind, error) {
	name = strings.ToLower(name)
	if name == "all" {
		return getKinds, nil
	}
	var known []string
	for _, k := range getKinds {
		for _, n := range k.names {
			if n == name {
				return []getKind{k}, nil
			}
		}
		known = append(known, k.names[0])
	}
	return nil, fmt.Errorf("unknown kind %q: use one of %s or all", name, strings.Join(known, ", "))
}

// scope is where a get looks: one namespace, or all of them.
type scope struct {
	namespace     string
	allNamespaces bool
}

// list reads every object of k in sc, page by page. When a list across all namespaces is
// forbidden (a tenant's rights stop at its namespaces) it reads fallback instead and says so in
// note, rather than failing: a person sees what their rights show.
func (k getKind) list(ctx context.Context, c client.Reader, sc scope, fallback string) (ss []inspect.Summary, rv string, note string, err error) {
	if k.clusterScoped {
		return k.listClusterScoped(ctx, c, sc, fallback)
	}
	ns := sc.namespace
	if sc.allNamespaces {
		ns = ""
	}
	ss, rv, err = k.listIn(ctx, c, ns)
	if err != nil && apierrors.IsForbidden(err) && sc.allNamespaces && fallback != "" {
		note = fmt.Sprintf("%s: cannot list in all namespaces (forbidden); showing namespace %s", k.names[0], fallback)
		ss, rv, err = k.listIn(ctx, c, fallback)
	}
	if err != nil {
		return nil, "", "", fmt.Errorf("list %s: %w", k.names[0], err)
	}
	return ss, rv, note, nil
}

// listIn lists k in namespace ns ("" for all), in pages.
func (k getKind) listIn(ctx context.Context, c client.Reader, ns string) ([]inspect.Summary, string, error) {
	var out []inspect.Summary
	cont, rv := "", ""
	for {
		l := k.newList()
		opts := []client.ListOption{client.Limit(listPageSize), client.Continue(cont)}
		if ns != "" {
			opts = append(opts, client.InNamespace(ns))
		}
		if err := c.List(ctx, l, opts...); err != nil {
			return nil, "", err
		}
		if err := meta.EachListItem(l, func(o runtime.Object) error {
			if s, ok := k.summarize(o); ok {
				out = append(out, s)
			}
			return nil
		}); err != nil {
			return nil, "", err
		}
		la, err := meta.ListAccessor(l)
		if err != nil {
			return nil, "", err
		}
		if rv == "" {
			rv = la.GetResourceVersion()
		}
		if cont = la.GetContinue(); cont == "" {
			return out, rv, nil
		}
	}
}

// listClusterScoped lists tenants: every namespace, or the one named. A tenant may not list
// namespaces but may read its own.
func (k getKind) listClusterScoped(ctx context.Context, c client.Reader, sc scope, fallback string) ([]inspect.Summary, string, string, error) {
	one := func(name string) ([]inspect.Summary, string, error) {
		var ns corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "", nil
			}
			return nil, "", err
		}
		if s, ok := k.summarize(&ns); ok {
			return []inspect.Summary{s}, "", nil
		}
		return nil, "", nil
	}
	if !sc.allNamespaces {
		ss, rv, err := one(sc.namespace)
		if err != nil {
			return nil, "", "", fmt.Errorf("get namespace %s: %w", sc.namespace, err)
		}
		return ss, rv, "", nil
	}
	ss, rv, err := k.listIn(ctx, c, "")
	if err != nil && apierrors.IsForbidden(err) && fallback != "" {
		note := fmt.Sprintf("%s: cannot list namespaces (forbidden); showing namespace %s", k.names[0], fallback)
		ss, rv, err = one(fallback)
		if err == nil {
			return ss, rv, note, nil
		}
	}
	if err != nil {
		return nil, "", "", fmt.Errorf("list %s: %w", k.names[0], err)
	}
	return ss, rv, "", nil
}
