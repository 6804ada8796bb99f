package siteruntime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// HealthPath reports whether the runtime is healthy and which content it serves. The operator
// asks it of every updated pod after each step of a progressive rollout.
const HealthPath = "/.decofile/health"

// ResolveTypeKey names, in a Deco block, the module that renders or loads it.
const ResolveTypeKey = "__resolveType"

// ErrNotLoadable marks content the runtime refuses to load: a JSON object it cannot serve.
// The reload answers it with 422 and {"loaded":false}, and keeps the content it had.
var ErrNotLoadable = errors.New("content cannot be loaded")

// Validate is the runtime's check that a Decofile can be served: every object that names a
// module (__resolveType) must name it with a non-empty string, since a block whose module cannot
// be resolved renders nothing. Options.Validate adds a site's own checks.
func Validate(data []byte) error {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: %w", ErrNotLoadable, err)
	}
	return checkBlocks(v, "")
}

// maxDepth bounds the walk; JSON deeper than this is refused rather than followed.
const maxDepth = 512

func checkBlocks(v any, at string) error {
	type frame struct {
		v     any
		at    string
		depth int
	}
	stack := []frame{{v, at, 0}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if f.depth > maxDepth {
			return fmt.Errorf("%w: nested deeper than %d levels at %s", ErrNotLoadable, maxDepth, orRoot(f.at))
		}
		switch x := f.v.(type) {
		case map[string]any:
			if rt, ok := x[ResolveTypeKey]; ok {
				if s, isString := rt.(string); !isString || strings.TrimSpace(s) == "" {
					return fmt.Errorf("%w: block %s has a %s that is not a module name", ErrNotLoadable, orRoot(f.at), ResolveTypeKey)
				}
			}
			for k, c := range x {
				stack = append(stack, frame{c, f.at + "/" + k, f.depth + 1})
			}
		case []any:
			for i, c := range x {
				stack = append(stack, frame{c, fmt.Sprintf("%s/%d", f.at, i), f.depth + 1})
			}
		}
	}
	return nil
}

func orRoot(at string) string {
	if at == "" {
		return "/"
	}
	return at
}

// check runs Validate and the site's own Options.Validate.
func (r *Runtime) check(data []byte) error {
	if err := Validate(data); err != nil {
		return err
	}
	if r.opts.Validate != nil {
		if err := r.opts.Validate(data); err != nil {
			return fmt.Errorf("%w: %w", ErrNotLoadable, err)
		}
	}
	return nil
}

// Health is the answer of GET /.decofile/health.
type Health struct {
	// Status is "ok", or "unhealthy" (HTTP 503) when Options.Healthy reports a problem.
	Status string `json:"status"`
	// Loaded is true once content is served (always, for a runtime that started).
	Loaded bool `json:"loaded"`
	// ContentHash is the SHA-256 (hex) of the content served.
	ContentHash string `json:"contentHash"`
	// Timestamp the content was delivered with.
	Timestamp int64 `json:"timestamp"`
	// Error says what Options.Healthy reported.
	Error string `json:"error,omitempty"`
}

func (r *Runtime) handleHealth(w http.ResponseWriter, _ *http.Request) {
	snap := r.Current()
	h := Health{Status: "ok", Loaded: true, ContentHash: snap.Hash, Timestamp: snap.Timestamp}
	code := http.StatusOK
	if r.opts.Healthy != nil {
		if err := r.opts.Healthy(); err != nil {
			h.Status, h.Error, code = "unhealthy", err.Error(), http.StatusServiceUnavailable
		}
	}
	writeJSON(w, code, h)
}
