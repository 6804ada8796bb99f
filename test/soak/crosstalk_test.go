package soak

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/siteops/siteops/test/internal/nodeenv"
)

// crosstalkWatch reads a random tenant's site pods while the load and the faults run: no pod
// may ever serve another tenant's content, not only at the end.
type crosstalkWatch struct {
	s *soak

	mu    sync.Mutex
	reads int
	found []string
}

// watchCrosstalk reads one tenant's pods every 2 s until ctx ends.
func (s *soak) watchCrosstalk(ctx context.Context, wg *sync.WaitGroup) *crosstalkWatch {
	w := &crosstalkWatch{s: s}
	wg.Go(func() { wait.UntilWithContext(ctx, w.look, 2*time.Second) })
	return w
}

func (w *crosstalkWatch) look(ctx context.Context) {
	tn := w.s.tenants[w.s.intN(len(w.s.tenants))]
	pods, err := w.s.ReadyPodsNow(ctx, tn.ns, "site")
	if err != nil {
		return // the API server may be restarting
	}
	for _, p := range pods {
		body, err := nodeenv.FetchPodContent(ctx, p.Status.PodIP)
		if err != nil {
			continue // a pod frozen, restarting or going away
		}
		w.mu.Lock()
		w.reads++
		if other := w.s.foreignTenant(tn, body); other != nil && len(w.found) < 5 {
			w.found = append(w.found, fmt.Sprintf("%s pod %s served content of %s", tn.name, p.Name, other.name))
		}
		w.mu.Unlock()
	}
}

// invariant is the check of every read made while the run went.
func (w *crosstalkWatch) invariant() Invariant {
	w.mu.Lock()
	defer w.mu.Unlock()
	inv := Invariant{Name: "no pod ever served another tenant's content", Held: true,
		Detail: fmt.Sprintf("%d site pod reads while the run went", w.reads)}
	switch {
	case len(w.found) > 0:
		inv.Held, inv.Detail = false, strings.Join(w.found, "; ")
	case w.reads == 0:
		inv.Held, inv.Detail = false, "no site pod was read while the run went"
	}
	return inv
}
