package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/inspect"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/ui/access"
)

// resource is one kind of object the UI lists and acts on.
type resource struct {
	kind, group, plural string
	newObject           func() client.Object
	list                func(ctx context.Context, r client.Reader, opts ...client.ListOption) ([]inspect.Summary, error)
	// reconcile is true where the UI can ask for an immediate reconcile.
	reconcile bool
}

var (
	decofiles = resource{kind: inspect.KindDecofile, group: decov1.GroupVersion.Group, plural: "decofiles", reconcile: true,
		newObject: func() client.Object { return &decov1.Decofile{} },
		list: func(ctx context.Context, r client.Reader, opts ...client.ListOption) ([]inspect.Summary, error) {
			var l decov1.DecofileList
			if err := r.List(ctx, &l, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
				return nil, err
			}
			out := make([]inspect.Summary, 0, len(l.Items))
			for i := range l.Items {
				out = append(out, inspect.Decofile(&l.Items[i]))
			}
			return out, nil
		}}
	gitTargets = resource{kind: inspect.KindGitTarget, group: mirrorv1.GroupVersion.Group, plural: "gittargets",
		newObject: func() client.Object { return &mirrorv1.GitTarget{} },
		list: func(ctx context.Context, r client.Reader, opts ...client.ListOption) ([]inspect.Summary, error) {
			var l mirrorv1.GitTargetList
			if err := r.List(ctx, &l, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
				return nil, err
			}
			out := make([]inspect.Summary, 0, len(l.Items))
			for i := range l.Items {
				out = append(out, inspect.GitTarget(&l.Items[i]))
			}
			return out, nil
		}}
	watchRules = resource{kind: inspect.KindWatchRule, group: mirrorv1.GroupVersion.Group, plural: "watchrules",
		newObject: func() client.Object { return &mirrorv1.WatchRule{} },
		list: func(ctx context.Context, r client.Reader, opts ...client.ListOption) ([]inspect.Summary, error) {
			var l mirrorv1.WatchRuleList
			if err := r.List(ctx, &l, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
				return nil, err
			}
			out := make([]inspect.Summary, 0, len(l.Items))
			for i := range l.Items {
				out = append(out, inspect.WatchRule(&l.Items[i]))
			}
			return out, nil
		}}
	// tenants are namespaces with a cache user. Whoever may read the user's credentials Secret
	// may see the user's state.
	tenants = resource{kind: inspect.KindTenant, plural: "secrets",
		list: func(ctx context.Context, r client.Reader, opts ...client.ListOption) ([]inspect.Summary, error) {
			var l corev1.NamespaceList
			if err := r.List(ctx, &l, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
				return nil, err
			}
			var out []inspect.Summary
			for i := range l.Items {
				if ns := &l.Items[i]; isTenant(ns) {
					out = append(out, inspect.Tenant(ns))
				}
			}
			return out, nil
		}}
	actionable = map[string]resource{decofiles.plural: decofiles, gitTargets.plural: gitTargets, watchRules.plural: watchRules}
)

// Checks are the read checks a person must pass to see each kind's objects in a namespace (the
// Namespace field is left for the caller), for the live hub.
func Checks() map[string]access.Check {
	return map[string]access.Check{
		decofiles.kind:  readCheck(decofiles, ""),
		gitTargets.kind: readCheck(gitTargets, ""),
		watchRules.kind: readCheck(watchRules, ""),
		"Namespace":     readCheck(tenants, ""),
	}
}

// readCheck is what a person must be allowed to see res's objects in ns ("" for all namespaces).
func readCheck(res resource, ns string) access.Check {
	if res.kind == inspect.KindTenant {
		return access.Check{Verb: "get", Resource: "secrets", Namespace: ns, Name: decov1.ValkeyACLSecretName}
	}
	return access.Check{Verb: "list", Group: res.group, Resource: res.plural, Namespace: ns}
}

func isTenant(ns *corev1.Namespace) bool {
	return provision.Wanted(ns) || ns.Annotations[provision.AnnotationPasswordDigest] != ""
}

// visible lists res and keeps what p may read: everything when p may read it in every
// namespace, otherwise namespace by namespace.
func (s *Server) visible(ctx context.Context, p access.Person, res resource) ([]inspect.Summary, error) {
	all, err := res.list(ctx, s.b.Objects)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", res.plural, err)
	}
	if s.b.Access.Allowed(ctx, p, readCheck(res, "")) {
		return all, nil
	}
	allowed := map[string]bool{}
	out := all[:0:0]
	for _, o := range all {
		ok, seen := allowed[o.Namespace]
		if !seen {
			ok = s.b.Access.Allowed(ctx, p, readCheck(res, o.Namespace))
			allowed[o.Namespace] = ok
		}
		if ok {
			out = append(out, o)
		}
	}
	return out, nil
}

// overviewPage is the data of the overview.
type overviewPage struct {
	Counts    []kindCount
	Sites     []inspect.Summary
	MoreSites int
	Attention []inspect.Summary
	More      int
	Rollouts  []inspect.Summary
	Targets   []inspect.Summary
	Warnings  []eventRow
	WarnNote  string
	// Nodes are the Valkey nodes' last isolation proofs, for people who may list namespaces
	// (the platform team); ProofsNote says why there are none.
	Nodes      []nodeRow
	ProofsNote string
}

// nodeRow is one Valkey node's last isolation proof.
type nodeRow struct {
	Node       string
	At         time.Time
	Users      int
	Violations int
	TooPowerful  []string
	Err        string
}

// eventRow is one Warning Event.
type eventRow struct {
	Namespace, Object, Reason, Message string
	Last                               time.Time
	Count                              int32
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request, p access.Person) {
	ctx := r.Context()
	var page overviewPage
	var everything []inspect.Summary
	var namespaces []string
	for _, res := range []resource{decofiles, tenants, gitTargets, watchRules} {
		ss, err := s.visible(ctx, p, res)
		if err != nil {
			s.failErr(w, r, err)
			return
		}
		inspect.Sort(ss)
		page.Counts = append(page.Counts, countByState(res.kind, ss))
		everything = append(everything, ss...)
		switch res.kind {
		case inspect.KindDecofile:
			page.Rollouts = rolloutsInProgress(ss)
			page.Sites, page.MoreSites = ss[:min(len(ss), maxSites)], max(0, len(ss)-maxSites)
			namespaces = namespacesOf(ss)
		case inspect.KindGitTarget:
			page.Targets = ss
		}
	}
	inspect.Sort(everything)
	page.Attention, page.More = needingAttention(everything, 50)
	page.Warnings, page.WarnNote = s.warnings(ctx, p, namespaces, 20)
	page.Nodes, page.ProofsNote = s.nodes(ctx, p)
	s.render(w, r, p, "overview", "Overview", "", page)
}

// nodes are the Valkey nodes' last isolation proofs, shown to people who may list namespaces:
// node addresses are the platform's, not a tenant's, business.
func (s *Server) nodes(ctx context.Context, p access.Person) ([]nodeRow, string) {
	if s.b.Proofs == nil || !s.b.Access.Allowed(ctx, p, access.Check{Verb: "list", Resource: "namespaces"}) {
		return nil, ""
	}
	var rows []nodeRow
	for _, np := range s.b.Proofs.Last() {
		row := nodeRow{Node: np.Node, At: np.At, Users: np.Users, Err: np.Err}
		for user, n := range np.Violations {
			row.Violations += n
			row.TooPowerful = append(row.TooPowerful, user)
		}
		slices.Sort(row.TooPowerful)
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil, "no isolation proof on this replica yet: the elected leader runs them with each resync"
	}
	return rows, ""
}

// tenantProof sums up the last isolation proofs of a tenant's user across the nodes.
type tenantProof struct {
	Nodes      int
	Last       time.Time
	Violations int
	Failed     int
}

func (s *Server) tenantProof(user string) *tenantProof {
	if s.b.Proofs == nil {
		return nil
	}
	var tp tenantProof
	for _, np := range s.b.Proofs.Last() {
		tp.Nodes++
		if np.At.After(tp.Last) {
			tp.Last = np.At
		}
		tp.Violations += np.Violations[user]
		if np.Err != "" {
			tp.Failed++
		}
	}
	if tp.Nodes == 0 {
		return nil
	}
	return &tp
}

// maxSites and maxEventNamespaces bound the overview for people who see many namespaces.
const (
	maxSites           = 200
	maxEventNamespaces = 20
)

// namespacesOf lists the distinct namespaces of ss, in order.
func namespacesOf(ss []inspect.Summary) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s.Namespace) {
			out = append(out, s.Namespace)
		}
	}
	slices.Sort(out)
	return out
}

// warnings lists the newest Warning Events as the person: in namespaces when given one, else
// across every namespace when p may, else in each of namespaces (those whose sites p sees).
func (s *Server) warnings(ctx context.Context, p access.Person, namespaces []string, limit int) ([]eventRow, string) {
	c, err := s.b.As(p)
	if err != nil {
		return nil, "cannot read Events: " + err.Error()
	}
	list := func(ns string) ([]corev1.Event, error) {
		var l corev1.EventList
		opts := []client.ListOption{client.MatchingFields{"type": corev1.EventTypeWarning}, client.Limit(500)}
		if ns != "" {
			opts = append(opts, client.InNamespace(ns))
		}
		err := c.List(ctx, &l, opts...)
		return l.Items, err
	}
	var events []corev1.Event
	if len(namespaces) != 1 {
		events, err = list("")
	}
	if len(namespaces) == 1 || apierrors.IsForbidden(err) {
		err = nil
		for _, ns := range namespaces[:min(len(namespaces), maxEventNamespaces)] {
			items, lerr := list(ns)
			if lerr != nil && !apierrors.IsForbidden(lerr) {
				err = lerr
			}
			events = append(events, items...)
		}
	}
	if err != nil {
		return nil, "cannot read Events: " + err.Error()
	}
	rows := make([]eventRow, 0, len(events))
	for _, e := range events {
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.IsZero() {
			last = e.CreationTimestamp.Time
		}
		rows = append(rows, eventRow{Namespace: e.Namespace, Object: e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name,
			Reason: e.Reason, Message: e.Message, Last: last, Count: max(e.Count, 1)})
	}
	slices.SortFunc(rows, func(a, b eventRow) int { return b.Last.Compare(a.Last) })
	return rows[:min(limit, len(rows))], ""
}

// sitePage is the data of a Decofile's page.
type sitePage struct {
	Summary    inspect.Summary
	Source     string
	Trace      []inspect.Link
	Conditions []metav1.Condition
	Rollout    *decov1.RolloutStatus
	History    []decov1.RolloutRecord
	Actions    []action
	Suspended  bool
	// Blocks compares the stored content with the last content every pod confirmed, block by
	// block; Compared says what was compared, or why nothing was.
	Blocks   []inspect.BlockChange
	Compared string
}

// action is a button on a page, disabled when the person's rights would refuse it.
type action struct {
	Label, Path string
	Allowed     bool
}

func (s *Server) site(w http.ResponseWriter, r *http.Request, p access.Person) {
	ctx := r.Context()
	ns, name := r.PathValue("ns"), r.PathValue("name")
	if !s.b.Access.Allowed(ctx, p, access.Check{Verb: "get", Group: decofiles.group, Resource: decofiles.plural, Namespace: ns, Name: name}) {
		s.fail(w, r, http.StatusForbidden, fmt.Sprintf("%s may not read Decofiles in namespace %s", p.User, ns))
		return
	}
	var d decov1.Decofile
	if err := s.b.Objects.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		s.failErr(w, r, err)
		return
	}
	var cm *corev1.ConfigMap
	if d.Status.ConfigMapName != "" {
		if c, err := s.b.As(p); err == nil {
			cm = &corev1.ConfigMap{}
			if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: d.Status.ConfigMapName}, cm) != nil {
				cm = nil
			}
		}
	}
	page := sitePage{Summary: inspect.Decofile(&d), Trace: inspect.DecofileTrace(&d, cm, ""), Conditions: d.Status.Conditions,
		Rollout: d.Status.Rollout, History: d.Status.History, Suspended: d.Spec.Suspend}
	page.Actions = s.actions(ctx, p, decofiles, ns, name, d.Spec.Suspend)
	page.Blocks, page.Compared = s.blocks(ctx, p, &d, cm)
	s.render(w, r, p, "site", "Decofile "+ns+"/"+name, ns, page)
}

// maxComparedContent bounds the content the UI decodes to compare blocks (a stored
// decofile.bin could otherwise expand without limit).
const maxComparedContent = 16 << 20

// blocks compares d's stored content (cm) with the last good copy kept for its progressive
// rollout, both read as the person; without a different last good copy it lists the stored
// blocks.
func (s *Server) blocks(ctx context.Context, p access.Person, d *decov1.Decofile, cm *corev1.ConfigMap) ([]inspect.BlockChange, string) {
	st := &d.Status
	if cm == nil {
		return nil, "the stored content is not in a ConfigMap you may read (or not stored yet)"
	}
	current, err := storedContent(cm, st.Format, st.ContentHash)
	if err != nil {
		return nil, err.Error()
	}
	lg := st.LastGood
	if lg == nil || lg.ContentHash == st.ContentHash {
		changes, err := inspect.DiffBlocks(current, current)
		if err != nil {
			return nil, err.Error()
		}
		why := "the stored content " + shortHash(st.ContentHash) + " is the last every pod confirmed"
		if lg == nil {
			why = "the blocks of the stored content " + shortHash(st.ContentHash) + "; no earlier version is kept (a Decofile with spec.rollout keeps the last content every pod confirmed, and this page compares with it)"
		}
		return changes, why
	}
	c, err := s.b.As(p)
	if err != nil {
		return nil, err.Error()
	}
	var kept corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: d.LastGoodConfigMapName()}, &kept); err != nil {
		return nil, "the last good copy cannot be read: " + err.Error()
	}
	before, err := storedContent(&kept, lg.Format, lg.ContentHash)
	if err != nil {
		return nil, err.Error()
	}
	changes, err := inspect.DiffBlocks(before, current)
	if err != nil {
		return nil, err.Error()
	}
	return changes, "the stored content " + shortHash(st.ContentHash) + " against " + shortHash(lg.ContentHash) + ", the last every pod confirmed"
}

// storedContent decodes the merged JSON a ConfigMap holds in format and checks it is the
// content of hash: the ConfigMap is tenant-writable.
func storedContent(cm *corev1.ConfigMap, format decov1.Format, hash string) ([]byte, error) {
	if format == "" {
		format = decov1.FormatJSON
		if cm.Data[decov1.KeyBin] != "" {
			format = decov1.FormatBin
		}
	}
	key := decov1.KeyJSON
	if format == decov1.FormatBin {
		key = decov1.KeyBin
	}
	content, err := encode.Decode(format, cm.Data[key], maxComparedContent)
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
	}
	if hash != "" && encode.Hash(content) != hash {
		return nil, fmt.Errorf("ConfigMap %s does not hold the content the operator stored (%s): it was changed since", cm.Name, shortHash(hash))
	}
	return content, nil
}

// shortHash is the first 12 characters of a content hash, as the CLI prints it.
func shortHash(h string) string { return h[:min(12, len(h))] }

// actions are the buttons of an object, each enabled as far as p may patch it.
func (s *Server) actions(ctx context.Context, p access.Person, res resource, ns, name string, suspended bool) []action {
	allowed := s.b.Access.Allowed(ctx, p, access.Check{Verb: "patch", Group: res.group, Resource: res.plural, Namespace: ns, Name: name})
	base := "/namespaces/" + ns + "/" + res.plural + "/" + name + "/"
	var out []action
	if res.reconcile {
		out = append(out, action{Label: "Reconcile", Path: base + "reconcile", Allowed: allowed})
	}
	if suspended {
		return append(out, action{Label: "Resume", Path: base + "resume", Allowed: allowed})
	}
	return append(out, action{Label: "Suspend", Path: base + "suspend", Allowed: allowed})
}

// tenantPage is the data of a namespace's page.
type tenantPage struct {
	Namespace   string
	Tenant      *inspect.Summary
	TenantTrace []inspect.Link
	// Proof sums up the last isolation proofs of the namespace's cache user.
	Proof    *tenantProof
	Sites    []inspect.Summary
	Targets  []inspect.Summary
	Rules    []inspect.Summary
	Warnings []eventRow
	WarnNote string
}

func (s *Server) tenant(w http.ResponseWriter, r *http.Request, p access.Person) {
	ctx := r.Context()
	ns := r.PathValue("ns")
	page := tenantPage{Namespace: ns}
	any := false
	for _, res := range []resource{decofiles, gitTargets, watchRules} {
		if !s.b.Access.Allowed(ctx, p, readCheck(res, ns)) {
			continue
		}
		any = true
		ss, err := res.list(ctx, s.b.Objects, client.InNamespace(ns))
		if err != nil {
			s.failErr(w, r, err)
			return
		}
		inspect.Sort(ss)
		switch res.kind {
		case inspect.KindDecofile:
			page.Sites = ss
		case inspect.KindGitTarget:
			page.Targets = ss
		default:
			page.Rules = ss
		}
	}
	if s.b.Access.Allowed(ctx, p, readCheck(tenants, ns)) {
		any = true
		var n corev1.Namespace
		if err := s.b.Objects.Get(ctx, client.ObjectKey{Name: ns}, &n); err == nil && isTenant(&n) {
			t := inspect.Tenant(&n)
			page.Tenant = &t
			page.TenantTrace = inspect.TenantTrace(&n, true)
			page.Proof = s.tenantProof(provision.Username(ns))
		}
	}
	if !any {
		s.fail(w, r, http.StatusForbidden, fmt.Sprintf("%s may not read siteops objects in namespace %s", p.User, ns))
		return
	}
	page.Warnings, page.WarnNote = s.warnings(ctx, p, []string{ns}, 20)
	s.render(w, r, p, "tenant", "Namespace "+ns, ns, page)
}

// targetPage is the data of a GitTarget's page.
type targetPage struct {
	Summary    inspect.Summary
	Branch     string
	Path       string
	Provider   string
	Conditions []metav1.Condition
	History    []mirrorv1.PushRecord
	Excluded   []mirrorv1.ExcludedResource
	Commits    []Commit
	// CommitsKnown is false where the UI does not see the mirror's commits (siteops ui, or a
	// manager without the mirror part).
	CommitsKnown bool
	Rules        []inspect.Summary
	Actions      []action
}

func (s *Server) target(w http.ResponseWriter, r *http.Request, p access.Person) {
	ctx := r.Context()
	ns, name := r.PathValue("ns"), r.PathValue("name")
	if !s.b.Access.Allowed(ctx, p, access.Check{Verb: "get", Group: gitTargets.group, Resource: gitTargets.plural, Namespace: ns, Name: name}) {
		s.fail(w, r, http.StatusForbidden, fmt.Sprintf("%s may not read GitTargets in namespace %s", p.User, ns))
		return
	}
	var g mirrorv1.GitTarget
	if err := s.b.Objects.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &g); err != nil {
		s.failErr(w, r, err)
		return
	}
	page := targetPage{Summary: inspect.GitTarget(&g), Branch: g.Spec.Branch, Path: g.Spec.Path, Provider: g.Spec.ProviderRef.Name,
		Conditions: g.Status.Conditions, History: g.Status.History, Excluded: g.Status.Excluded,
		Actions: s.actions(ctx, p, gitTargets, ns, name, g.Spec.Suspend)}
	if s.b.Commits != nil {
		page.CommitsKnown = true
		page.Commits = s.b.Commits.Recent(ns, name, 50)
	}
	if s.b.Access.Allowed(ctx, p, readCheck(watchRules, ns)) {
		rules, err := watchRules.list(ctx, s.b.Objects, client.InNamespace(ns))
		if err == nil {
			var mine []inspect.Summary
			for _, rule := range rules {
				if target := fieldValue(rule, "TARGET"); target == name || target == ns+"/"+name {
					mine = append(mine, rule)
				}
			}
			page.Rules = mine
		}
	}
	s.render(w, r, p, "target", "GitTarget "+ns+"/"+name, ns, page)
}

// fieldValue is the wide field name of s, or "".
func fieldValue(s inspect.Summary, name string) string {
	for _, f := range s.Wide {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

func (s *Server) mirror(w http.ResponseWriter, r *http.Request, p access.Person) {
	ctx := r.Context()
	targets, err := s.visible(ctx, p, gitTargets)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	rules, err := s.visible(ctx, p, watchRules)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	inspect.Sort(targets)
	inspect.Sort(rules)
	s.render(w, r, p, "mirror", "Mirror", "", struct{ Targets, Rules []inspect.Summary }{targets, rules})
}

// act reconciles, suspends or resumes an object as the person: the API server decides.
func (s *Server) act(w http.ResponseWriter, r *http.Request, p access.Person) {
	ctx := r.Context()
	ns, name, action := r.PathValue("ns"), r.PathValue("name"), r.PathValue("action")
	res, ok := actionable[r.PathValue("resource")]
	var patch string
	switch {
	case !ok:
		s.fail(w, r, http.StatusNotFound, "no such kind")
		return
	case action == "suspend":
		patch = `{"spec":{"suspend":true}}`
	case action == "resume":
		patch = `{"spec":{"suspend":null}}`
	case action == "reconcile" && res.reconcile:
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, decov1.AnnotationReconcileRequestedAt, time.Now().UTC().Format(time.RFC3339Nano))
	default:
		s.fail(w, r, http.StatusNotFound, "no such action")
		return
	}
	c, err := s.b.As(p)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	obj := res.newObject()
	obj.SetNamespace(ns)
	obj.SetName(name)
	if err := c.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		s.failErr(w, r, fmt.Errorf("%s %s %s/%s: %w", action, res.kind, ns, name, err))
		return
	}
	back := "/namespaces/" + ns
	if res.kind != inspect.KindWatchRule {
		back += "/" + res.plural + "/" + name
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// layoutData is what the layout reads around each page.
type layoutData struct {
	Title     string
	Person    access.Person
	Live      bool
	Namespace string
	Page      any
}

// render writes page name with data; a request from the page's live script gets only the main
// part.
func (s *Server) render(w http.ResponseWriter, r *http.Request, p access.Person, name, title, ns string, data any) {
	var buf bytes.Buffer
	tmpl := "layout"
	if r.Header.Get("X-Siteops-Fragment") != "" {
		tmpl = "main"
	}
	ld := layoutData{Title: title, Person: p, Live: s.b.Hub != nil && name != "error", Namespace: ns, Page: data}
	if err := s.pages[name].ExecuteTemplate(&buf, tmpl, ld); err != nil {
		s.o.Log.Error("render page", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// failErr answers with the status an API error calls for.
func (s *Server) failErr(w http.ResponseWriter, r *http.Request, err error) {
	var status apierrors.APIStatus
	code := http.StatusInternalServerError
	switch {
	case apierrors.IsNotFound(err):
		code = http.StatusNotFound
	case apierrors.IsForbidden(err):
		code = http.StatusForbidden
	case apierrors.IsConflict(err), apierrors.IsInvalid(err):
		code = http.StatusConflict
	case errors.As(err, &status):
		code = int(status.Status().Code)
	}
	if code >= 500 {
		s.o.Log.Error("serve page", "path", r.URL.Path, "err", err)
	}
	s.fail(w, r, code, err.Error())
}

// fail answers with an error page that says what failed and nothing of the object.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	var buf bytes.Buffer
	data := layoutData{Title: http.StatusText(code), Page: struct {
		Code    int
		Message string
	}{code, msg}}
	if err := s.pages["error"].ExecuteTemplate(&buf, "layout", data); err != nil {
		http.Error(w, msg, code)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}
