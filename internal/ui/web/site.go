package web

import (
	"context"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/inspect"
	"github.com/siteops/siteops/internal/ui/access"
)

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

// readable reads the page's object (namespace and name from the path) from the cache into obj
// when p may get it; otherwise it answers the request itself, saying nothing of the object.
func (s *Server) readable(w http.ResponseWriter, r *http.Request, p access.Person, res resource, obj client.Object) bool {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	if !s.b.Access.Allowed(r.Context(), p, access.Check{Verb: "get", Group: res.group, Resource: res.plural, Namespace: ns, Name: name}) {
		s.fail(w, r, http.StatusForbidden, fmt.Sprintf("%s may not read %ss in namespace %s", p.User, res.kind, ns))
		return false
	}
	if err := s.b.Objects.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		s.failErr(w, r, err)
		return false
	}
	return true
}

func (s *Server) site(w http.ResponseWriter, r *http.Request, p access.Person) {
	ctx := r.Context()
	ns, name := r.PathValue("ns"), r.PathValue("name")
	var d decov1.Decofile
	if !s.readable(w, r, p, decofiles, &d) {
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
