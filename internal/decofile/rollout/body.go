package rollout

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/budget"
	"github.com/siteops/siteops/internal/decofile/notify"
)

// newRolloutMemory is the budget running push rollouts share: a namespace's share is a third of
// it, so no two namespaces can hold all of it.
func newRolloutMemory(total int64) *budget.Budget {
	return budget.New(total, max(total/3, 1))
}

// pushBody is the body a push rollout sends, with the rollout memory it is charged to. Only a
// rollout that is sending holds it: a progressive rollout drops it before it pauses and loads it
// again for its next step, so paused rollouts hold no memory that others wait for.
type pushBody struct {
	r      *Reconciler
	df     *decov1alpha1.Decofile
	loader Loader
	id     string

	body    []byte
	release func()
}

func (r *Reconciler) newPushBody(df *decov1alpha1.Decofile, id string) *pushBody {
	return &pushBody{r: r, df: df, id: id}
}

// reserve waits until the rollout memory holds room for df's content, telling the Decofile's
// status when it has to wait. It does nothing when the room is held already or pods are not sent
// the content (the poll protocol).
func (b *pushBody) reserve(ctx context.Context) error {
	if b.release != nil || b.r.opts.Protocol != notify.ProtocolPush {
		return nil
	}
	n := min(ContentLimit(b.df, b.r.opts.MaxContentBytes), b.r.memory.Total())
	release, err := b.r.memory.AcquireOrReport(ctx, b.df.Namespace, n, func() {
		logf.FromContext(ctx).Info("waiting for rollout memory")
		_ = b.r.patchStatus(ctx, client.ObjectKeyFromObject(b.df), func(d *decov1alpha1.Decofile) bool {
			return setCondition(d, metav1.ConditionUnknown, decov1alpha1.ReasonNotificationInProgress,
				"Waiting for rollout memory (--notify-memory-bytes) before notifying pods for "+b.id)
		})
	})
	if err != nil {
		return err
	}
	b.release = release
	return nil
}

// set holds content as the body to send.
func (b *pushBody) set(c Content) {
	if b.r.opts.Protocol == notify.ProtocolPush {
		b.body = notify.PushBody(c.Timestamp, c.JSON)
	}
}

// get returns the body to send, loading the stored content again (after reserve) when it was
// dropped. The loader checks that the store still holds the version of the rollout.
func (b *pushBody) get(ctx context.Context) ([]byte, error) {
	if b.body != nil || b.r.opts.Protocol != notify.ProtocolPush {
		return b.body, nil
	}
	if err := b.reserve(ctx); err != nil {
		return nil, err
	}
	c, err := b.r.load(ctx, b.loader, b.df)
	if err != nil {
		b.drop()
		return nil, fmt.Errorf("load stored content again: %w", err)
	}
	b.set(c)
	return b.body, nil
}

// drop lets go of the body and gives its memory back; get loads it again.
func (b *pushBody) drop() {
	b.body = nil
	if b.release != nil {
		b.release()
		b.release = nil
	}
}
