package web

import (
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/inspect"
	"github.com/siteops/siteops/internal/ui/access"
)

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
	// Pending lists the changes the mirror holds but has not pushed, oldest first, at most
	// PendingMax; PendingKnown is false where the UI does not see them.
	Pending      []Pending
	PendingKnown bool
	PendingMax   int
	Rules        []inspect.Summary
	Actions      []action
}

// pendingShown is how many of a GitTarget's pending changes its page lists.
const pendingShown = 100

func (s *Server) target(w http.ResponseWriter, r *http.Request, p access.Person) {
	ctx := r.Context()
	ns, name := r.PathValue("ns"), r.PathValue("name")
	var g mirrorv1.GitTarget
	if !s.readable(w, r, p, gitTargets, &g) {
		return
	}
	page := targetPage{Summary: inspect.GitTarget(&g), Branch: g.Spec.Branch, Path: g.Spec.Path, Provider: g.Spec.ProviderRef.Name,
		Conditions: g.Status.Conditions, History: g.Status.History, Excluded: g.Status.Excluded,
		Actions: s.actions(ctx, p, gitTargets, ns, name, g.Spec.Suspend)}
	if s.b.Commits != nil {
		page.CommitsKnown = true
		page.Commits = s.b.Commits.Recent(ns, name, 50)
	}
	if s.b.Pending != nil {
		page.PendingKnown, page.PendingMax = true, pendingShown
		page.Pending = s.b.Pending.Pending(ns, name, pendingShown)
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
	s.render(w, r, p, "mirror", "Mirror", "", struct {
		Targets, Rules []inspect.Summary
		Verify         *verifyView
	}{targets, rules, s.verifyReport(ctx)})
}
