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
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
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
		list:      lister(func(l *decov1.DecofileList) []inspect.Summary { return each(l.Items, inspect.Decofile) })}
	gitTargets = resource{kind: inspect.KindGitTarget, group: mirrorv1.GroupVersion.Group, plural: "gittargets",
		newObject: func() client.Object { return &mirrorv1.GitTarget{} },
		list:      lister(func(l *mirrorv1.GitTargetList) []inspect.Summary { return each(l.Items, inspect.GitTarget) })}
	watchRules = resource{kind: inspect.KindWatchRule, group: mirrorv1.GroupVersion.Group, plural: "watchrules",
		newObject: func() client.Object { return &mirrorv1.WatchRule{} },
		list:      lister(func(l *mirrorv1.WatchRuleList) []inspect.Summary { return each(l.Items, inspect.WatchRule) })}
	// tenants are namespaces with a cache user. Whoever may read the user's credentials Secret
	// may see the user's state.
	tenants = resource{kind: inspect.KindTenant, plural: "secrets",
		list: lister(func(l *corev1.NamespaceList) []inspect.Summary {
			var out []inspect.Summary
			for i := range l.Items {
				if ns := &l.Items[i]; isTenant(ns) {
					out = append(out, inspect.Tenant(ns))
				}
			}
			return out
		})}
	actionable = map[string]resource{decofiles.plural: decofiles, gitTargets.plural: gitTargets, watchRules.plural: watchRules}
)

// lister lists a kind from the cache (sharing its objects: they are only read) and summarises
// the items.
func lister[L any, PL interface {
	*L
	client.ObjectList
}](summarize func(*L) []inspect.Summary) func(context.Context, client.Reader, ...client.ListOption) ([]inspect.Summary, error) {
	return func(ctx context.Context, r client.Reader, opts ...client.ListOption) ([]inspect.Summary, error) {
		l := PL(new(L))
		if err := r.List(ctx, l, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
			return nil, err
		}
		return summarize(l), nil
	}
}

// each summarises every item.
func each[T any](items []T, summarize func(*T) inspect.Summary) []inspect.Summary {
	out := make([]inspect.Summary, 0, len(items))
	for i := range items {
		out = append(out, summarize(&items[i]))
	}
	return out
}

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
	Node        string
	At          time.Time
	Users       int
	Violations  int
	TooPowerful []string
	Err         string
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
	// SignOut shows the sign-out link (people signed in with OIDC).
	SignOut bool
}

// render writes page name with data; a request from the page's live script gets only the main
// part.
func (s *Server) render(w http.ResponseWriter, r *http.Request, p access.Person, name, title, ns string, data any) {
	var buf bytes.Buffer
	tmpl := "layout"
	if r.Header.Get("X-Siteops-Fragment") != "" {
		tmpl = "main"
	}
	ld := layoutData{Title: title, Person: p, Live: s.b.Hub != nil && name != "error", Namespace: ns, Page: data, SignOut: s.o.Login != nil}
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
