// Package inline is the inline source kind: the blocks are spec.inline.value itself.
package inline

import (
	"context"
	"encoding/json"
	"fmt"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/sources/kind"
)

// Kind is the inline source kind.
type Kind struct{}

// New returns the inline kind; it needs nothing from env.
func New(kind.Env) kind.Kind { return Kind{} }

// Type is inline.
func (Kind) Type() decov1.SourceType { return decov1.SourceInline }

// Remote is false: the content is in the Decofile.
func (Kind) Remote() bool { return false }

// Resolve has no revision to find: the download decodes spec.inline.
func (Kind) Resolve(_ context.Context, df *decov1.Decofile) (kind.Resolution, error) {
	in := df.Spec.Inline
	if in == nil {
		return kind.Resolution{}, kind.Invalid("spec.source is inline but spec.inline is not set")
	}
	return kind.Resolution{Download: func(context.Context) (source.Blocks, error) {
		values := make(map[string]json.RawMessage, len(in.Value))
		for k, v := range in.Value {
			values[k] = v.Raw
		}
		return source.Inline(values)
	}}, nil
}

// Keys are none: a push never changes inline content.
func (Kind) Keys(*decov1.Decofile) []string { return nil }

// Moves is false: the content changes only with the Decofile.
func (Kind) Moves(*decov1.Decofile) bool { return false }

// Describe counts the blocks. A Decofile read from the manager's cache has its content
// trimmed (a nil value): its count is not known there, so none is given.
func (Kind) Describe(df *decov1.Decofile) string {
	if df.Spec.Inline == nil || df.Spec.Inline.Value == nil {
		return "inline"
	}
	return fmt.Sprintf("inline, %d blocks", len(df.Spec.Inline.Value))
}
