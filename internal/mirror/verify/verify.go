package verify

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/store"
)

// Commit trailers the mirror writes (see docs/mirror-attribution.md): the writer's own names, so
// what is read cannot drift from what is written.
const (
	TrailerAuditID     = gitwriter.TrailerAuditID
	TrailerAttribution = gitwriter.TrailerAttribution
	TrailerCluster     = gitwriter.TrailerCluster
)

// unlabelled is the class of a change whose commit's Attribution trailers cannot be paired with
// it (several results in a commit a CommitRequest closed, or audit IDs without a result).
const unlabelled = "unlabelled"

// commitSlack is how much later than a commit an audit event may be stamped and still be the
// change's request: the API server stamps the event when it has answered, which may be a moment
// after the watch event the mirror committed.
const commitSlack = time.Second

// Options configures Verify.
type Options struct {
	// Since skips commits made before it (audit events before it are not read either).
	Since time.Time
	// Ref is the branch or reference to read; empty means HEAD.
	Ref string
	// Cluster, when set, keeps only commits whose Cluster trailer names it.
	Cluster string
	// Identity derives the author the mirror would write for an audit event's user; its
	// NoreplyDomain must be the mirror's --author-noreply-domain.
	Identity attribution.Identity
}

// Change is one mirrored change and what the audit log says about it.
type Change struct {
	Commit  string
	Path    string
	Removal bool
	// Class is the attribution result the commit claims; AuditID the request it names.
	Class   string
	AuditID string
	// Author is the commit's author; Expected the author the audit log's request gives.
	Author   gitwriter.Signature
	Expected *gitwriter.Signature
	// Truth is the class the audit log's request calls for; empty when the log has none.
	Truth  string
	Reason string
}

// ClassStats counts one attribution result class.
type ClassStats struct {
	// Claimed changes carry the class; Correct of them name the audit log's user.
	Claimed, Correct int
	// Truth changes call for the class by the audit log; Recalled of them name its user.
	Truth, Recalled int
}

// Report is the outcome of Verify.
type Report struct {
	Commits, Changes int
	Classes          map[string]*ClassStats
	// Mismatches are changes that name someone else than the audit log's user.
	Mismatches []Change
	// Missed are changes committed without an author (absent) whose request the log holds.
	Missed []Change
	// Unverifiable are changes the audit log says nothing about (before --since, replays).
	Unverifiable int
	AuditEvents  int
}

// OpenRepository opens a local repository (a path, working tree or bare) or clones a remote
// URL into memory.
func OpenRepository(src string) (*git.Repository, error) {
	if st, err := os.Stat(src); err == nil && st.IsDir() {
		// A bare repository (a git host's own copy) opens as it is; a folder inside a working
		// tree finds its .git above.
		r, err := git.PlainOpen(src)
		if errors.Is(err, git.ErrRepositoryNotExists) {
			r, err = git.PlainOpenWithOptions(src, &git.PlainOpenOptions{DetectDotGit: true})
		}
		if err != nil {
			return nil, fmt.Errorf("open the git repository at %s: %w", src, err)
		}
		return r, nil
	}
	r, err := git.Clone(memory.NewStorage(), nil, &git.CloneOptions{URL: src, NoCheckout: true})
	if err != nil {
		return nil, fmt.Errorf("clone %s (a local path must exist; a URL must be readable without prompting): %w", src, err)
	}
	return r, nil
}

// Verify walks the history of repo from opts.Ref and checks each mirrored change against log.
func Verify(repo *git.Repository, log *AuditLog, opts Options) (*Report, error) {
	tip, err := resolveRef(repo, opts.Ref)
	if err != nil {
		return nil, err
	}
	iter, err := repo.Log(&git.LogOptions{From: tip})
	if err != nil {
		return nil, fmt.Errorf("read the history from %s: %w", tip, err)
	}
	rep := &Report{Classes: map[string]*ClassStats{}, AuditEvents: log.Events}
	err = iter.ForEach(func(c *object.Commit) error {
		if c.Committer.When.Before(opts.Since) {
			return nil
		}
		tr := Trailers(c.Message)
		if opts.Cluster != "" && !slices.Contains(tr[TrailerCluster], opts.Cluster) {
			return nil
		}
		changes, err := commitChanges(c)
		if err != nil {
			return err
		}
		if len(changes) == 0 {
			return nil
		}
		rep.Commits++
		for _, ch := range judge(c, tr, changes, log, opts.Identity) {
			rep.add(ch)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rep, nil
}

func resolveRef(repo *git.Repository, ref string) (plumbing.Hash, error) {
	if ref == "" {
		h, err := repo.Head()
		if err == nil {
			return h.Hash(), nil
		}
		// A clone without a checked-out HEAD: take the remote's default branch.
		ref = "HEAD"
	}
	h, err := repo.ResolveRevision(plumbing.Revision(ref))
	if err != nil {
		for _, cand := range []string{"refs/remotes/origin/" + ref, "refs/heads/" + ref} {
			if h2, err2 := repo.ResolveRevision(plumbing.Revision(cand)); err2 == nil {
				return *h2, nil
			}
		}
		return plumbing.ZeroHash, fmt.Errorf("resolve %q in the repository: %w (give --ref a branch name)", ref, err)
	}
	return *h, nil
}

// Trailers reads "Key: value" lines of a commit message's last paragraph.
func Trailers(msg string) map[string][]string {
	out := map[string][]string{}
	paras := strings.Split(strings.TrimSpace(msg), "\n\n")
	for _, line := range strings.Split(paras[len(paras)-1], "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			continue
		}
		out[k] = append(out[k], strings.TrimSpace(v))
	}
	return out
}

// fileChange is one file a commit added, changed or removed, as a mirrored object.
type fileChange struct {
	path    string
	obj     objectKey
	removal bool
}

// commitChanges lists the mirrored files a commit changed against its first parent. Files
// outside the mirror's layout (<ns or _cluster>/<group or core>/<resource>/<name>.yaml) are
// skipped.
func commitChanges(c *object.Commit) ([]fileChange, error) {
	tree, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("read the tree of %s: %w", c.Hash, err)
	}
	var parent *object.Tree
	if c.NumParents() > 0 {
		p, err := c.Parent(0)
		if err != nil {
			return nil, fmt.Errorf("read the parent of %s: %w", c.Hash, err)
		}
		if parent, err = p.Tree(); err != nil {
			return nil, fmt.Errorf("read the tree of %s: %w", p.Hash, err)
		}
	}
	diff, err := object.DiffTree(parent, tree)
	if err != nil {
		return nil, fmt.Errorf("diff %s against its parent: %w", c.Hash, err)
	}
	var out []fileChange
	for _, d := range diff {
		path, removal := d.To.Name, false
		if path == "" {
			path, removal = d.From.Name, true
		}
		if o, ok := objectOf(path); ok {
			out = append(out, fileChange{path: path, obj: o, removal: removal})
		}
	}
	return out, nil
}

func objectOf(path string) (objectKey, bool) {
	seg := strings.Split(path, "/")
	if len(seg) < 4 || !strings.HasSuffix(seg[len(seg)-1], ".yaml") {
		return objectKey{}, false
	}
	seg = seg[len(seg)-4:]
	o := objectKey{namespace: seg[0], group: seg[1], resource: seg[2], name: strings.TrimSuffix(seg[3], ".yaml")}
	if o.namespace == "_cluster" {
		o.namespace = ""
	}
	if o.group == "core" {
		o.group = ""
	}
	return o, o.resource != "" && o.name != ""
}

// judge pairs a commit's changes with the audit IDs it names and checks each against the log.
// The mirror writes one Audit-ID per distinct request (a collection delete's removals share
// one; several writes of one file collapsed into one change each have theirs) and one
// Attribution per distinct result — one per commit, except in a commit a CommitRequest closed.
func judge(c *object.Commit, tr map[string][]string, changes []fileChange, log *AuditLog, id attribution.Identity) []Change {
	ids, classes := tr[TrailerAuditID], tr[TrailerAttribution]
	out := make([]Change, len(changes))
	claimed := make([]*auditv1.Event, len(changes))
	for i, ch := range changes {
		out[i] = Change{Commit: c.Hash.String()[:12], Path: ch.path, Removal: ch.removal, Author: gitwriter.Signature{Name: c.Author.Name, Email: c.Author.Email}}
	}
	for _, auditID := range ids {
		ev := log.byID[auditID]
		if ev == nil {
			continue // before --since, or another API server's log
		}
		for j, ch := range changes {
			if !wrote(ev, ch) {
				continue
			}
			// Writes collapsed into one change: the last one made the file. A removal keeps
			// its first delete (the credit sticks to it).
			if claimed[j] == nil || (!ch.removal && claimed[j].StageTimestamp.Time.Before(ev.StageTimestamp.Time)) {
				claimed[j], out[j].AuditID = ev, auditID
			}
		}
	}
	for i := range changes {
		switch {
		case len(classes) == 1:
			out[i].Class = classes[0]
		case len(classes) == 0 && len(ids) == 0:
			out[i].Class = string(store.AttributionAbsent)
		case out[i].AuditID == "" && slices.Contains(classes, string(store.AttributionAbsent)):
			out[i].Class = string(store.AttributionAbsent)
		default:
			out[i].Class = unlabelled
		}
	}
	at := c.Author.When.Add(commitSlack)
	for i, ch := range changes {
		truth := claimed[i]
		if truth == nil || ch.removal != (truth.Verb == "delete" || truth.Verb == "deletecollection") {
			truth = log.truth(ch.obj, ch.removal, at)
		}
		if truth == nil {
			continue
		}
		sig := id.Signature(factOf(truth))
		out[i].Expected = &sig
		out[i].Truth = truthClass(truth)
	}
	return out
}

// wrote reports whether ev is a request for ch's object: the object it names, or for a
// collection delete a removal in its scope.
func wrote(ev *auditv1.Event, ch fileChange) bool {
	o := eventObject(ev)
	if ch.obj == o {
		return true
	}
	scope := ch.obj
	scope.name = ""
	return o.name == "" && ch.removal && o == scope && removes(ev, ch.obj)
}

// factOf is the attribution fact the mirror would build from ev's user.
func factOf(ev *auditv1.Event) store.AuthorFact {
	u := ev.User
	if ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username != "" {
		u = *ev.ImpersonatedUser
	}
	display, email := store.UserClaims(u)
	return store.AuthorFact{Author: u.Username, DisplayName: display, Email: email, IsServiceAccount: store.IsServiceAccountName(u.Username)}
}

// truthClass is the result an exact attribution of ev's change has.
func truthClass(ev *auditv1.Event) string {
	switch {
	case ev.Verb == "deletecollection":
		if items, ok := listedItems(ev); ok && items > 0 {
			return string(store.AttributionExactDeleteCollectionItem)
		}
		return string(store.AttributionExactDeleteCollectionScope)
	case store.IsServiceAccountName(factOf(ev).Author):
		return string(store.AttributionExactServiceAccount)
	}
	return string(store.AttributionExactUser)
}

func (r *Report) class(name string) *ClassStats {
	s := r.Classes[name]
	if s == nil {
		s = &ClassStats{}
		r.Classes[name] = s
	}
	return s
}

func (r *Report) add(ch Change) {
	r.Changes++
	if ch.Expected == nil {
		r.Unverifiable++
		return
	}
	correct := *ch.Expected == ch.Author
	claimed := r.class(ch.Class)
	claimed.Claimed++
	truth := r.class(ch.Truth)
	truth.Truth++
	if correct {
		claimed.Correct++
		truth.Recalled++
		return
	}
	if ch.Class == string(store.AttributionAbsent) {
		ch.Reason = "committed without an author"
		r.Missed = append(r.Missed, ch)
		return
	}
	ch.Reason = "the author is not the audit log's user"
	r.Mismatches = append(r.Mismatches, ch)
}

// ErrMismatch is returned (wrapped) by Report.Err when a change names someone else.
var ErrMismatch = errors.New("mirrored changes name another author than the audit log")

// Err is ErrMismatch (wrapped, with the count) when the report lists mismatches (counted when
// mismatches is set) or misses (when missed is set), else nil.
func (r *Report) Err(mismatches, missed bool) error {
	n := 0
	if mismatches {
		n += len(r.Mismatches)
	}
	if missed {
		n += len(r.Missed)
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d changes: %w", n, r.Changes, ErrMismatch)
}

// Print writes the report: precision and recall per class, then the mismatches and misses.
func (r *Report) Print(w io.Writer) error {
	fmt.Fprintf(w, "%d commits, %d mirrored changes, %d audit events (%d changes unverifiable: no request in the log)\n\n", r.Commits, r.Changes, r.AuditEvents, r.Unverifiable)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESULT\tCLAIMED\tCORRECT\tPRECISION\tBY AUDIT LOG\tRECALLED\tRECALL")
	names := make([]string, 0, len(r.Classes))
	for n := range r.Classes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := r.Classes[n]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s\n", n, s.Claimed, s.Correct, ratio(s.Correct, s.Claimed), s.Truth, s.Recalled, ratio(s.Recalled, s.Truth))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, list := range []struct {
		title string
		chs   []Change
	}{{"mismatches", r.Mismatches}, {"missed (committed without an author)", r.Missed}} {
		if len(list.chs) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%d):\n", list.title, len(list.chs))
		for _, ch := range list.chs {
			verb := "write"
			if ch.Removal {
				verb = "removal"
			}
			id := ch.AuditID
			if id == "" {
				id = "-"
			}
			fmt.Fprintf(w, "  %s %s %s [%s, audit %s]: author %s <%s>, audit log: %s <%s> (%s)\n",
				ch.Commit, verb, ch.Path, ch.Class, id, ch.Author.Name, ch.Author.Email, ch.Expected.Name, ch.Expected.Email, ch.Truth)
		}
	}
	return nil
}

func ratio(a, b int) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}
