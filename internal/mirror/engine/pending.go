package engine

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/siteops/siteops/internal/mirror/gitwriter"
)

// PendingLog reads the changes the engine's writers took but have not pushed yet, per GitTarget.
type PendingLog struct{ e *Engine }

// Pending returns a view of the changes the engine's writers took but have not pushed yet.
func (e *Engine) Pending() *PendingLog { return &PendingLog{e} }

// Pending returns copies of up to limit of the changes of GitTarget namespace/name its writer
// holds unpushed, oldest first, never more than gitwriter.MaxPendingChanges; none when the engine
// does not run the target (another replica leads, or it is suspended or removed). See
// gitwriter.Writer.PendingChanges.
func (l *PendingLog) Pending(namespace, name string, limit int) []gitwriter.PendingChange {
	w, spec, err := l.e.Writer(types.NamespacedName{Namespace: namespace, Name: name})
	if err != nil {
		return nil
	}
	return w.PendingChanges(spec.UID, limit)
}
