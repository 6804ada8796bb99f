package s3target_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/rollout"
	"github.com/siteops/siteops/internal/decofile/s3target"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/pkg/siteruntime"
)

// TestBadPublishToS3IsRolledBack: on the s3 target, content every pod confirmed under
// spec.rollout is kept as a copy beside the object; a publish the pods refuse (the runtime
// answers 422) is caught at the first step and rolled back from that copy: the object holds the
// good content again under a newer timestamp, every pod serves it, a pod that starts afterwards
// loads it, PodsNotified=False reason RolledBack names the step and the pod, and a Warning Event
// says so.
func TestBadPublishToS3IsRolledBack(t *testing.T) {
	sh := setup(t)
	c := sh.c
	ctx := context.Background()
	ns := c.Namespace(t, "s3rollback", nil)
	startManager(t, c, ns, sh.cfg)

	df := inlineDecofile(ns, "store", decov1.TargetS3, map[string]string{"products": `{"shoe":{"price":9}}`})
	df.Spec.Rollout = &decov1.RolloutSpec{
		Steps: []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("100%")},
		Pause: &metav1.Duration{Duration: 100 * time.Millisecond},
	}
	if err := c.Client.Create(ctx, df); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	dep := deployment(ns, "store", "store")
	if err := c.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	var pods []*siteruntime.Runtime
	for i := range 3 {
		pods = append(pods, startPod(t, c, sh, dep, df, fmt.Sprintf("store-%d", i)))
	}

	// A change once the pods run reaches every pod and is kept as the last good copy.
	good := map[string]string{"products": `{"shoe":{"price":10}}`}
	update(t, c, df, setBlock("products", good["products"]))
	goodJSON := merged(t, good)
	goodHash := encode.Hash(goodJSON)
	key := df.S3ObjectKey(prefix)
	testenv.Eventually(t, waitFor, func() error {
		d := get(t, c, df)
		if lg := d.Status.LastGood; lg == nil || lg.ContentHash != goodHash || d.Status.NotifiedHash != goodHash {
			return fmt.Errorf("the change is not confirmed and kept yet: lastGood %+v, notified %s", d.Status.LastGood, d.Status.NotifiedHash)
		}
		return nil
	})
	if data, _, err := object(t, sh.s3, key+s3target.LastGoodSuffix); err != nil || !bytes.Equal(data, goodJSON) {
		t.Fatalf("last good copy %s%s: %q %v, want %q", key, s3target.LastGoodSuffix, data, err, goodJSON)
	}
	before := get(t, c, df)

	// Content the runtime refuses to load: step 1 (store-0) answers 422 and the rollout rolls
	// back.
	update(t, c, df, setBlock("products", `{"shoe":{"__resolveType":""}}`))
	badHash := encode.Hash(merged(t, map[string]string{"products": `{"shoe":{"__resolveType":""}}`}))
	var got *decov1.Decofile
	testenv.Eventually(t, waitFor, func() error {
		got = get(t, c, df)
		p := meta.FindStatusCondition(got.Status.Conditions, decov1.ConditionPodsNotified)
		if p == nil || p.Status != metav1.ConditionFalse || p.Reason != rollout.ReasonRolledBack || !strings.Contains(p.Message, "step 1/2 failed: store-0: HTTP 422") {
			return fmt.Errorf("PodsNotified %+v", p)
		}
		return nil
	})
	if ro := got.Status.Rollout; ro == nil || ro.FailedHash != badHash || ro.Phase != rollout.PhaseRolledBack || ro.Step != 1 {
		t.Fatalf("rollout status %+v", got.Status.Rollout)
	}
	if got.Status.ContentHash != goodHash || got.Status.NotifiedHash != goodHash || got.Status.Timestamp <= before.Status.Timestamp || got.Status.S3URL != before.Status.S3URL {
		t.Fatalf("status %+v, want the good content %s under a newer timestamp than %d at %s", got.Status, goodHash, before.Status.Timestamp, before.Status.S3URL)
	}
	data, out, err := object(t, sh.s3, key)
	if err != nil || !bytes.Equal(data, goodJSON) || out.Metadata[s3target.MetaTimestamp] != fmt.Sprint(got.Status.Timestamp) {
		t.Fatalf("object %s holds %q (metadata %v), %v; want the good content at timestamp %d", key, data, out.Metadata, err, got.Status.Timestamp)
	}
	for i, rt := range pods {
		if rt.Current().Hash != goodHash {
			t.Fatalf("store-%d serves %s after the rollback", i, rt.Current().Decofile)
		}
	}
	hasEvent(t, c, df, corev1.EventTypeWarning, rollout.ReasonRolledBack, "store-0")
	// The delivery controller does not upload the rolled-back version again (Ready=False,
	// RolledBack, until the source changes), and a pod that starts now loads the good content
	// from the bucket.
	waitReady(t, c, df, metav1.ConditionFalse, rollout.ReasonRolledBack, nil)
	if late := startPod(t, c, sh, dep, df, "store-3"); late.Current().Hash != goodHash {
		t.Fatalf("a pod started after the rollback loaded %s", late.Current().Decofile)
	}
	if d := get(t, c, df); d.Status.ContentHash != goodHash {
		t.Fatalf("the rolled-back version was stored again: %+v", d.Status)
	}
}
