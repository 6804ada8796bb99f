package web

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/siteops/siteops/internal/mirror/verify"
)

// verifyView is a `mirror verify` report as the Mirror page shows it.
type verifyView struct {
	Commits, Changes, AuditEvents, Unverifiable int
	Classes                                     []classRow
	Mismatches, Missed                          []changeRow
	// Err says why the report could not be made.
	Err string
}

// classRow is one attribution result's precision and recall.
type classRow struct {
	Class                             string
	Claimed, Correct, Truth, Recalled int
	Precision, Recall                 string
}

// changeRow is one change whose author is not the one the audit log names.
type changeRow struct {
	Commit, Path, Class, AuditID, Author, Expected, Truth string
	Removal                                               bool
}

// verifyReport runs the configured verification; nil when none is configured.
func (s *Server) verifyReport(ctx context.Context) *verifyView {
	if s.b.Verify == nil {
		return nil
	}
	rep, err := s.b.Verify(ctx)
	if err != nil {
		return &verifyView{Err: err.Error()}
	}
	v := &verifyView{Commits: rep.Commits, Changes: rep.Changes, AuditEvents: rep.AuditEvents, Unverifiable: rep.Unverifiable}
	for name, c := range rep.Classes {
		v.Classes = append(v.Classes, classRow{Class: name, Claimed: c.Claimed, Correct: c.Correct, Truth: c.Truth, Recalled: c.Recalled,
			Precision: ratio(c.Correct, c.Claimed), Recall: ratio(c.Recalled, c.Truth)})
	}
	slices.SortFunc(v.Classes, func(a, b classRow) int { return strings.Compare(a.Class, b.Class) })
	v.Mismatches, v.Missed = changeRows(rep.Mismatches), changeRows(rep.Missed)
	return v
}

func changeRows(chs []verify.Change) []changeRow {
	out := make([]changeRow, 0, len(chs))
	for _, ch := range chs {
		row := changeRow{Commit: ch.Commit, Path: ch.Path, Class: ch.Class, AuditID: ch.AuditID, Removal: ch.Removal, Truth: ch.Truth,
			Author: fmt.Sprintf("%s <%s>", ch.Author.Name, ch.Author.Email)}
		if ch.Expected != nil {
			row.Expected = fmt.Sprintf("%s <%s>", ch.Expected.Name, ch.Expected.Email)
		}
		out = append(out, row)
	}
	return out
}

// ratio is a/b as a percentage, or "—" when b is 0.
func ratio(a, b int) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}
