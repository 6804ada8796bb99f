package ui

import (
	"fmt"

	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/ui/web"
)

// MirrorCommits shows the mirror engine's record of pushed commits on GitTarget pages; nil
// (no mirror part) shows none.
func MirrorCommits(log *engine.CommitLog) web.CommitLog {
	if log == nil {
		return nil
	}
	return mirrorCommits{log}
}

// mirrorCommits reads an engine.CommitLog as a web.CommitLog.
type mirrorCommits struct{ log *engine.CommitLog }

// Recent returns the newest commits of GitTarget namespace/name as the pages show them.
func (m mirrorCommits) Recent(namespace, name string, limit int) []web.Commit {
	cs := m.log.Recent(namespace, name, limit)
	out := make([]web.Commit, 0, len(cs))
	for _, c := range cs {
		audit := c.AuditID
		if c.AuditIDs > 1 {
			audit = fmt.Sprintf("%s (+%d)", c.AuditID, c.AuditIDs-1)
		}
		out = append(out, web.Commit{Hash: c.Hash, Author: c.Author, Attribution: c.Attribution, AuditID: audit,
			Message: c.Message, Files: c.Files, Time: c.Pushed})
	}
	return out
}
