// Package ruleaccess implements the admission check that a WatchRule or ClusterWatchRule only
// mirrors what the user creating or changing it may read: for each resource the rule selects,
// a SubjectAccessReview asks whether that user may list and watch it (in the rule's namespace
// for a WatchRule, cluster-wide for a ClusterWatchRule), and the rule is refused naming every
// resource the user may not read.
//
// Without this check a tenant allowed to create WatchRules in its namespace could have the
// mirror, which reads nearly everything, copy resources the tenant cannot read (RoleBindings,
// resources of platform CRDs) into the tenant's own git repository.
package ruleaccess

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/resolve"
)

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// verbs are the access a user needs on a resource for a rule to mirror it: what the mirror does.
var verbs = []string{"list", "watch"}

// secretVerbs are the access a user needs for a rule to mirror Secrets (encrypted, when its
// GitTarget opts in): every read, since a Secret's values are what reading it is about.
var secretVerbs = []string{"get", "list", "watch"}

var secretsResource = schema.GroupResource{Resource: "secrets"}

// verbsFor returns the verbs checked for gr.
func verbsFor(gr schema.GroupResource) []string {
	if gr == secretsResource {
		return secretVerbs
	}
	return verbs
}

// ReviewCreator creates SubjectAccessReviews (a controller-runtime client).
type ReviewCreator interface {
	Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error
}

// Checker is the admission handler.
type Checker struct {
	// Discovery lists the served resources; each review reads it afresh, so a resource whose API
	// appeared a moment ago is checked too (rules are written rarely).
	Discovery discovery.DiscoveryInterface
	// Reviews asks the API server's authorizer about the requesting user.
	Reviews ReviewCreator
	// Concurrency bounds the SubjectAccessReviews in flight for one request; default 8.
	Concurrency int
}

// access is one group/resource a rule may read, with the version discovery chose (if any).
type access struct {
	gr      schema.GroupResource
	version string
}

// Handle allows a CREATE, or an UPDATE that changes the spec, only when the requesting user may
// list and watch every resource the rule selects. Anything else (other operations, metadata or
// status-only updates) is allowed untouched.
func (c *Checker) Handle(ctx context.Context, req admission.Request) admission.Response {
	kind := req.Kind.Kind
	if req.Kind.Group != mirrorv1alpha1.GroupVersion.Group || (kind != "WatchRule" && kind != "ClusterWatchRule") {
		return admission.Allowed("")
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	namespaced := kind == "WatchRule"
	rules, err := specRules(req.Object.Raw)
	if err != nil {
		Reviews.WithLabelValues(kind, ResultError).Inc()
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the %s: %w", kind, err))
	}
	if req.Operation == admissionv1.Update {
		old, err := specOf(req.OldObject.Raw)
		if err == nil {
			now, _ := specOf(req.Object.Raw)
			if equality.Semantic.DeepEqual(old, now) {
				return admission.Allowed("spec unchanged")
			}
		}
	}
	log := logf.FromContext(ctx).WithName("watchrule-access").WithValues("kind", kind, "namespace", req.Namespace, "name", req.Name, "user", req.UserInfo.Username)
	targets, err := c.selected(rules, namespaced)
	if err != nil {
		log.Error(err, "resolve the rule's resources")
		Reviews.WithLabelValues(kind, ResultError).Inc()
		return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("resolve the resources the %s selects through API discovery; retry: %w", kind, err))
	}
	ns := ""
	if namespaced {
		ns = req.Namespace
	}
	denied, err := c.review(ctx, req.UserInfo, ns, targets)
	if err != nil {
		log.Error(err, "SubjectAccessReview")
		Reviews.WithLabelValues(kind, ResultError).Inc()
		return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("could not check whether %s may read the resources the %s selects; retry", req.UserInfo.Username, kind))
	}
	if len(denied) > 0 {
		Reviews.WithLabelValues(kind, ResultDenied).Inc()
		where := "cluster-wide"
		if namespaced {
			where = "in namespace " + ns
		}
		log.Info("refused: the user may not read what the rule selects", "resources", denied)
		need := strings.Join(verbs, " and ")
		if slices.Contains(denied, secretsResource.String()) {
			need = strings.Join(secretVerbs[:len(secretVerbs)-1], ", ") + " and " + secretVerbs[len(secretVerbs)-1]
		}
		return admission.Denied(fmt.Sprintf("a %s may only mirror what its author may read: %s may not %s %s %s",
			kind, req.UserInfo.Username, need, strings.Join(denied, ", "), where))
	}
	Reviews.WithLabelValues(kind, ResultAllowed).Inc()
	return admission.Allowed("")
}

// Results of a review (the metric's result label).
const (
	ResultAllowed = "allowed"
	ResultDenied  = "denied"
	ResultError   = "error"
)

func specRules(raw []byte) ([]mirrorv1alpha1.ResourceRule, error) {
	s, err := specOf(raw)
	if err != nil {
		return nil, err
	}
	return s.Rules, nil
}

// spec holds the fields WatchRule and ClusterWatchRule specs share.
type spec struct {
	TargetRef mirrorv1alpha1.TargetReference `json:"targetRef"`
	Rules     []mirrorv1alpha1.ResourceRule  `json:"rules"`
}

func specOf(raw []byte) (spec, error) {
	var obj struct {
		Spec spec `json:"spec"`
	}
	if len(raw) == 0 {
		return spec{}, fmt.Errorf("no object in the request")
	}
	err := json.Unmarshal(raw, &obj)
	return obj.Spec, err
}

// selected is what the rules read: every resource they resolve to now, and every group/resource
// they name explicitly (so a rule naming a resource whose API is not served yet is checked
// before that API appears). Secrets are checked: any GitTarget may opt in to write them
// (encrypted), now or later. Resources the mirror never reads (noisy types) are left out.
func (c *Checker) selected(rules []mirrorv1alpha1.ResourceRule, namespaced bool) ([]access, error) {
	groups, lists, err := resolve.Discover(c.Discovery)
	if err != nil {
		return nil, err
	}
	// A rule that matches nothing yet is not an error here: the rule controller reports it, and
	// the names it gives are checked below.
	res, _ := resolve.RulesFor(groups, lists, rules, namespaced, true)
	excluded := map[string]bool{}
	for _, e := range res.Excluded {
		excluded[e.Resource] = true
	}
	seen := map[schema.GroupResource]bool{}
	var out []access
	for _, r := range res.Resources {
		gr := r.GVR.GroupResource()
		if !seen[gr] {
			seen[gr] = true
			out = append(out, access{gr: gr, version: r.GVR.Version})
		}
	}
	for _, rule := range rules {
		for _, g := range rule.APIGroups {
			for _, name := range rule.Resources {
				gr := schema.GroupResource{Group: g, Resource: name}
				if g == "*" || name == "*" || strings.Contains(name, "/") || seen[gr] || excluded[gr.String()] {
					continue
				}
				seen[gr] = true
				out = append(out, access{gr: gr})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].gr.String() < out[j].gr.String() })
	return out, nil
}

// review runs one SubjectAccessReview per resource and verb for user and returns the resources
// (resource.group) the user may not read.
func (c *Checker) review(ctx context.Context, user authenticationv1.UserInfo, namespace string, targets []access) ([]string, error) {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	limit := c.Concurrency
	if limit <= 0 {
		limit = 8
	}
	var (
		mu     sync.Mutex
		denied []string
		errs   []error
		wg     sync.WaitGroup
		sem    = make(chan struct{}, limit)
	)
	for _, t := range targets {
		for _, verb := range verbsFor(t.gr) {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra,
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: namespace, Verb: verb, Group: t.gr.Group, Version: t.version, Resource: t.gr.Resource,
					},
				}}
				err := c.Reviews.Create(ctx, sar)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("review %s %s: %w", verb, t.gr, err))
				case !sar.Status.Allowed:
					denied = append(denied, t.gr.String())
				}
			}()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	slices.Sort(denied)
	return slices.Compact(denied), nil
}

var _ admission.Handler = (*Checker)(nil)
