// Package sources registers the Decofile source kinds: the one place that maps spec.source to
// its implementation. Everything else asks the Registry and never switches on the kind.
package sources

import (
	"fmt"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/sources/fluxsource"
	"github.com/siteops/siteops/internal/decofile/sources/git"
	"github.com/siteops/siteops/internal/decofile/sources/github"
	"github.com/siteops/siteops/internal/decofile/sources/inline"
	"github.com/siteops/siteops/internal/decofile/sources/kind"
	"github.com/siteops/siteops/internal/decofile/sources/oci"
)

// kinds are the source kinds, one line each.
var kinds = []func(kind.Env) kind.Kind{
	inline.New,
	github.New,
	git.New,
	oci.New,
	fluxsource.New,
}

// Registry finds the kind of a Decofile's spec.source.
type Registry struct {
	byType map[decov1.SourceType]kind.Kind
}

// New builds every kind with env. A zero Env serves what needs no remote: Keys, Moves,
// Describe and Remote.
func New(env kind.Env) *Registry {
	r := &Registry{byType: make(map[decov1.SourceType]kind.Kind, len(kinds))}
	for _, build := range kinds {
		k := build(env)
		r.byType[k.Type()] = k
	}
	return r
}

// Describing is a registry for what needs no remote (Describe, Keys, Moves).
var Describing = New(kind.Env{})

// For is the kind of df's spec.source; an unknown kind is invalid content.
func (r *Registry) For(df *decov1.Decofile) (kind.Kind, error) {
	if k, ok := r.byType[df.Spec.Source]; ok {
		return k, nil
	}
	return nil, kind.Invalid("unknown spec.source %q", df.Spec.Source)
}

// Keys are the push-index keys of what df follows.
func (r *Registry) Keys(df *decov1.Decofile) []string {
	if k, err := r.For(df); err == nil {
		return k.Keys(df)
	}
	return nil
}

// Moves reports whether df's reference is resolved again every spec.interval.
func (r *Registry) Moves(df *decov1.Decofile) bool {
	k, err := r.For(df)
	return err == nil && k.Moves(df)
}

// Remote reports whether df's content comes from outside the Decofile.
func (r *Registry) Remote(df *decov1.Decofile) bool {
	k, err := r.For(df)
	return err == nil && k.Remote()
}

// Describe names where df's content comes from.
func (r *Registry) Describe(df *decov1.Decofile) string {
	if k, err := r.For(df); err == nil {
		return k.Describe(df)
	}
	return fmt.Sprintf("%s (unknown source kind)", df.Spec.Source)
}

// Watchers are the kinds whose content other Kubernetes objects announce.
func (r *Registry) Watchers() []kind.Watcher {
	var out []kind.Watcher
	for _, k := range r.byType {
		if w, ok := k.(kind.Watcher); ok {
			out = append(out, w)
		}
	}
	return out
}
