package ui

import (
	"strings"

	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/sanitize"
	"github.com/siteops/siteops/internal/ui/web"
)

// MirrorPending shows the changes the mirror engine holds but has not pushed yet on GitTarget
// pages; nil (no mirror part) shows none.
func MirrorPending(log *engine.PendingLog) web.PendingLog {
	if log == nil {
		return nil
	}
	return mirrorPending{log}
}

// mirrorPending reads an engine.PendingLog as a web.PendingLog.
type mirrorPending struct{ log *engine.PendingLog }

// Pending returns the pending changes of GitTarget namespace/name as the pages show them.
func (m mirrorPending) Pending(namespace, name string, limit int) []web.Pending {
	cs := m.log.Pending(namespace, name, limit)
	out := make([]web.Pending, 0, len(cs))
	for _, c := range cs {
		out = append(out, web.Pending{Path: c.Path, Operation: c.Operation, Resource: resourceOf(c),
			Author: c.Author, Attribution: c.Attribution, Arrived: c.Received})
	}
	return out
}

// resourceOf names the object of c as "Kind namespace/name" (a cluster-scoped object as "Kind
// name"), or by its reference when the kind is not known.
func resourceOf(c gitwriter.PendingChange) string {
	if c.Kind == "" {
		return c.Ref
	}
	parts := strings.Split(c.Ref, "/")
	if len(parts) < 3 {
		return c.Kind + " " + c.Ref
	}
	ns, name := parts[len(parts)-2], parts[len(parts)-1]
	if ns == sanitize.ClusterScopeDir {
		return c.Kind + " " + name
	}
	return c.Kind + " " + ns + "/" + name
}
