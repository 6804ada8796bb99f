package gitwriter

import (
	"fmt"
	"net/mail"
	"slices"
	"strings"
)

// Trailer keys every commit's provenance is written under (git trailer format: a last
// paragraph of "Key: value" lines, read by `git interpret-trailers --parse` and
// `git log --format=%(trailers)`). `siteops mirror verify` reads them; keep them exactly.
const (
	TrailerAuditID     = "Audit-ID"
	TrailerAttribution = "Attribution"
	TrailerCluster     = "Cluster"
)

// AttributionAbsent is the attribution result of a change no audit fact named (the store's
// "absent"); Config.Unattributed authors such changes.
const AttributionAbsent = "absent"

// attributionOrder ranks results from the strongest, so a commit listing several (one closed by a
// CommitRequest) lists them in a stable order; unknown results sort last.
var attributionOrder = []string{"exact_user", "exact_serviceaccount", "exact_deletecollection_item", "exact_deletecollection_scope", "weak", AttributionAbsent}

// attributionOf is the result a change's commit states: a change never attributed (attribution
// off, a replayed object, a sweep) is absent.
func attributionOf(op Op) string {
	if r := trailerValue(op.Change.Attribution); r != "" {
		return r
	}
	return AttributionAbsent
}

// trailers is the provenance paragraph of a commit holding ops: one Audit-ID per distinct audit
// event (a collection delete's items share one), one Attribution per distinct result (always
// one, except in a commit closed by a CommitRequest, whose changes may differ), then Cluster.
func (w *Writer) trailers(ops []*Op) string {
	ids, results := provenance(ops)
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(TrailerAuditID + ": " + id + "\n")
	}
	for _, r := range results {
		b.WriteString(TrailerAttribution + ": " + r + "\n")
	}
	if c := trailerValue(w.cfg.Cluster); c != "" {
		b.WriteString(TrailerCluster + ": " + c + "\n")
	}
	return b.String()
}

// provenance returns the distinct Audit-IDs of ops, in order, and their distinct attribution
// results, strongest first: the values of a commit's Audit-ID and Attribution trailers.
func provenance(ops []*Op) (ids, results []string) {
	for _, op := range ops {
		if id := trailerValue(op.Change.AuditID); id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
		if r := attributionOf(*op); !slices.Contains(results, r) {
			results = append(results, r)
		}
	}
	slices.SortStableFunc(results, func(a, b string) int { return rank(a) - rank(b) })
	return ids, results
}

func rank(result string) int {
	if i := slices.Index(attributionOrder, result); i >= 0 {
		return i
	}
	return len(attributionOrder)
}

// trailerValue keeps a value on one trailer line: control characters are dropped, since a
// newline would start a trailer of the value's choosing.
func trailerValue(s string) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s))
}

// withTrailers appends the provenance paragraph to msg after a blank line. The paragraph is
// never empty (Attribution is always there), so it is the message's last paragraph, the only
// one git reads trailers from: trailer-like lines in a CommitRequest's message stay body text.
func withTrailers(msg, trailers string) string {
	return strings.TrimRight(msg, "\n") + "\n\n" + trailers
}

// bodyText makes a message given by a CommitRequest safe to precede the trailers: a line that
// starts with "---" would make git stop reading at it (a patch divider) and take trailer-like
// lines above it as the commit's trailers, so such lines are indented by one space.
func bodyText(msg string) string {
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "---") {
			lines[i] = " " + l
		}
	}
	return strings.Join(lines, "\n")
}

// ParseSignature parses a git identity written "Name <email>" (--unattributed-author).
func ParseSignature(s string) (Signature, error) {
	a, err := mail.ParseAddress(s)
	if err != nil || strings.TrimSpace(a.Name) == "" {
		return Signature{}, fmt.Errorf("%q is not \"Name <email>\"", s)
	}
	return Signature{Name: strings.TrimSpace(a.Name), Email: a.Address}, nil
}
