package cutover

import (
	"fmt"
	"io"
	"sort"
	"strings"

	kustv1 "github.com/fluxcd/kustomize-controller/api/v1"
)

// Print writes the report and, when there are hazards, the safe sequence.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "cut-over from %s to the working tree (%s)\n", r.Base, r.Where)
	for _, d := range r.Drift {
		fmt.Fprintf(w, "live differs from git: %s\n", d)
	}
	for _, k := range r.Removed {
		fmt.Fprintf(w, "removed Kustomization: %s\n", k)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	moves := map[string]int{}
	var stateful []Resource
	for _, m := range r.Moving {
		moves[m.From+" -> "+m.To]++
		if m.Stateful() {
			stateful = append(stateful, m)
		}
	}
	keys := make([]string, 0, len(moves))
	for k := range moves {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "moving: %d resources\n", len(r.Moving))
	for _, k := range keys {
		fmt.Fprintf(w, "  %s: %d\n", k, moves[k])
	}
	for _, s := range stateful {
		fmt.Fprintf(w, "stateful resource moves: %s (%s -> %s)%s\n", s.ID, s.From, s.To, protected(s))
		for _, h := range s.Helm {
			fmt.Fprintf(w, "  Helm release object: %s\n", h.ID)
		}
	}
	if len(r.Hazards) == 0 {
		fmt.Fprintln(w, "no hazard: no moving resource can be pruned")
		return
	}
	for _, h := range r.Hazards {
		state := "UNMITIGATED"
		if h.Mitigated {
			state = "mitigated (every resource carries " + PruneAnnotation + ": " + PruneDisabled + ")"
		}
		switch h.Kind {
		case PruneRemoval:
			why := "prune: true"
			if h.DeletionPolicy != "" && h.DeletionPolicy != kustv1.DeletionPolicyMirrorPrune {
				why = "deletionPolicy: " + h.DeletionPolicy
			}
			fmt.Fprintf(w, "HAZARD %s [%s]: Kustomization %s is removed while it has %s at %s; its finalizer deletes the %d resources the new Kustomizations are to adopt\n", h.Kind, state, h.Kustomization, why, r.Base, len(h.Resources))
		case MoveUp:
			fmt.Fprintf(w, "HAZARD %s [%s]: %d resources leave Kustomization %s (prune: true) for a Kustomization that reconciles after it; %s prunes them before they are adopted\n", h.Kind, state, len(h.Resources), h.Kustomization, h.Kustomization)
		}
		for _, res := range h.Resources {
			loss := ""
			if res.Stateful() {
				loss = "  DATA LOSS"
			}
			to := res.To
			if res.LiveOnly {
				to = "(nothing: in the live inventory only, no Kustomization of the working tree builds it)"
			}
			fmt.Fprintf(w, "  %s -> %s%s%s\n", res.ID, to, protected(res), loss)
			if res.Kind == HelmReleaseKind && !res.Protected {
				fmt.Fprintf(w, "    deleting the HelmRelease uninstalls the release, which deletes its %d objects:\n", len(res.Helm))
				for _, o := range res.Helm {
					loss := ""
					if o.Stateful() {
						loss = "  DATA LOSS"
					}
					fmt.Fprintf(w, "      %s%s\n", o.ID, loss)
				}
			}
		}
	}
	if !r.Unmitigated() {
		return
	}
	fmt.Fprintln(w, "safe sequence:")
	step := 1
	for _, h := range r.Hazards {
		if h.Mitigated {
			continue
		}
		switch {
		case h.Kind == PruneRemoval && h.DeletionPolicy != "" && h.DeletionPolicy != kustv1.DeletionPolicyMirrorPrune:
			// prune: false is not enough: Delete and WaitForTermination ignore it.
			fmt.Fprintf(w, "  %d. merge a change of its own first that sets `deletionPolicy: Orphan` on Kustomization %s (prune: false\n     does not help with deletionPolicy: %s), and wait until\n     `kubectl -n flux-system get kustomization %s -o jsonpath='{.spec.deletionPolicy}'` prints Orphan\n", step, h.Kustomization, h.DeletionPolicy, h.Kustomization)
		default:
			fmt.Fprintf(w, "  %d. merge a change of its own first that sets `prune: false` on Kustomization %s, and wait until\n     `kubectl -n flux-system get kustomization %s -o jsonpath='{.spec.prune}'` prints false\n", step, h.Kustomization, h.Kustomization)
		}
		step++
	}
	fmt.Fprintf(w, "  %d. or, before merging, protect the objects Flux must not delete (at least the stateful ones):\n", step)
	for _, h := range r.Hazards {
		for _, res := range h.Resources {
			if !res.Protected && res.Stateful() {
				fmt.Fprintf(w, "     %s\n", annotate(res, PruneDisabled))
			}
		}
	}
	step++
	fmt.Fprintf(w, "  %d. then merge this change; the new Kustomizations adopt the unchanged objects in place\n", step)
	step++
	fmt.Fprintf(w, "  %d. once they own them: restore prune on any Kustomization you kept, and drop the annotations:\n", step)
	for _, h := range r.Hazards {
		for _, res := range h.Resources {
			if !res.Protected && res.Stateful() {
				fmt.Fprintf(w, "     %s\n", annotate(res, "-"))
			}
		}
	}
}

func protected(r Resource) string {
	if r.Protected {
		return " (prune disabled)"
	}
	return ""
}

func annotate(r Resource, value string) string {
	kind, rest, _ := strings.Cut(r.ID, " ")
	ns, name, ok := strings.Cut(rest, "/")
	if !ok {
		name, ns = rest, ""
	}
	nsFlag := ""
	if ns != "" {
		nsFlag = "-n " + ns + " "
	}
	arg := PruneAnnotation + "=" + value
	if value == "-" {
		arg = PruneAnnotation + "-"
	}
	return fmt.Sprintf("kubectl %sannotate %s/%s %s", nsFlag, strings.ToLower(kind), name, arg)
}
