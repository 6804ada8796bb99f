package s3target_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/s3target"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/pkg/siteruntime"
)

func merged(t *testing.T, blocks map[string]string) []byte {
	t.Helper()
	b := source.Blocks{}
	for k, v := range blocks {
		b[k] = []byte(v)
	}
	m, err := encode.Merge(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestColdStartRolloutAndGate: an s3-target Decofile is uploaded to the shared key; the webhook
// injects DECO_RELEASE with that object's https URL (no volume) and merges the host into
// DECO_ALLOWED_AUTHORITIES; an anonymous GET of that exact URL returns the merged JSON, and a
// site runtime cold-starts from it. Unchanged content uploads nothing; a change uploads once
// and is pushed to the running pods.
func TestColdStartRolloutAndGate(t *testing.T) {
	sh := setup(t)
	c := sh.c
	ctx := context.Background()
	ns := c.Namespace(t, "s3", nil)
	m := startManager(t, c, ns, sh.cfg)

	blocks := map[string]string{"site": `{"name":"first"}`, "pages": `{"home":"<b>&</b>"}`}
	df := inlineDecofile(ns, "shop", decov1.TargetS3, blocks)
	df.Spec.DeploymentID = "shop-prod"
	if err := c.Client.Create(ctx, df); err != nil {
		t.Fatal(err)
	}
	want := merged(t, blocks)
	key := prefix + "/" + ns + "/shop-prod/decofile.json"
	if got := df.S3ObjectKey(prefix); got != key {
		t.Fatalf("shared key %q, want %q", got, key)
	}
	publicURL := sh.cdn.URL + "/" + bucket + "/" + key
	got := waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	if got.Status.S3URL != publicURL || got.Status.ContentHash != encode.Hash(want) || got.Status.ConfigMapName != "" || got.Status.Timestamp == 0 {
		t.Fatalf("status %+v, want s3URL %s and the hash of %s", got.Status, publicURL, want)
	}
	data, out, err := object(t, sh.s3, key)
	if err != nil || !bytes.Equal(data, want) {
		t.Fatalf("object %s: %q %v, want %q", key, data, err, want)
	}
	if aws.ToString(out.ContentType) != "application/json" || aws.ToString(out.CacheControl) != "no-cache" {
		t.Errorf("object headers Content-Type %q Cache-Control %q", aws.ToString(out.ContentType), aws.ToString(out.CacheControl))
	}
	var cm corev1.ConfigMap
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: df.ConfigMapName()}, &cm); err == nil {
		t.Errorf("ConfigMap %s written for an s3-target Decofile", cm.Name)
	}
	if n := m.puts.puts.Load(); n != 1 {
		t.Errorf("%d PutObject requests for the first version, want 1", n)
	}

	// The webhook's view: https URL, authority merged, no volume.
	dep := deployment(ns, "shop", "shop")
	if err := c.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	env, stored := envOf(t, c, dep)
	release := env[decov1.EnvRelease].Value
	if release != publicURL {
		t.Fatalf("%s = %q, want %q", decov1.EnvRelease, release, publicURL)
	}
	host := strings.TrimPrefix(sh.cdn.URL, "https://")
	if a := env[decov1.EnvAllowedAuthorities].Value; a != decov1.DefaultAllowedAuthorities+","+host {
		t.Errorf("%s = %q, want the runtime defaults plus %s", decov1.EnvAllowedAuthorities, a, host)
	}
	if n := len(stored.Spec.Template.Spec.Volumes) + len(stored.Spec.Template.Spec.Containers[0].VolumeMounts); n != 0 {
		t.Errorf("s3 target injected %d volumes/mounts: %+v", n, stored.Spec.Template.Spec)
	}
	// Anonymous GET, like a pod through a CDN: no AWS signature.
	resp, err := sh.cdn.Client().Get(release)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, want) {
		t.Fatalf("anonymous GET %s: %d %q, want 200 %q", release, resp.StatusCode, body, want)
	}

	a := startPod(t, c, sh, dep, df, "shop-a")
	b := startPod(t, c, sh, dep, df, "shop-b")
	if cur := a.Current(); cur.Hash != encode.Hash(want) {
		t.Fatalf("cold start loaded %s, want %s", cur.Decofile, want)
	}

	// Unchanged content: a forced reconcile (annotation) does not upload again.
	before := m.puts.puts.Load()
	update(t, c, df, func(d *decov1.Decofile) { d.Annotations = map[string]string{"test/poke": "1"} })
	// A spec change that keeps the content reconciles at a new generation: Ready is recorded
	// for it without an upload.
	update(t, c, df, func(d *decov1.Decofile) { d.Spec.Interval = &metav1.Duration{Duration: 2 * time.Minute} })
	waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	if n := m.puts.puts.Load() - before; n != 0 {
		t.Fatalf("%d PutObject requests for unchanged content, want 0", n)
	}

	// Changed content: exactly one upload, then a push to every pod.
	blocks["site"] = `{"name":"second"}`
	update(t, c, df, setBlock("site", blocks["site"]))
	want2 := merged(t, blocks)
	got2 := waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, func(d *decov1.Decofile) error {
		if d.Status.ContentHash != encode.Hash(want2) {
			return errNotYet
		}
		return nil
	})
	testenv.Eventually(t, waitFor, func() error {
		d := get(t, c, df)
		p := meta.FindStatusCondition(d.Status.Conditions, decov1.ConditionPodsNotified)
		if p == nil || p.Status != metav1.ConditionTrue || d.Status.NotifiedHash != encode.Hash(want2) {
			return fmt.Errorf("PodsNotified %+v, notifiedHash %s", p, d.Status.NotifiedHash)
		}
		for _, rt := range []*siteruntime.Runtime{a, b} {
			if cur := rt.Current(); cur.Hash != encode.Hash(want2) || cur.Timestamp != got2.Status.Timestamp {
				return fmt.Errorf("pod serves %s at %d", cur.Decofile, cur.Timestamp)
			}
		}
		return nil
	})
	if n := m.puts.puts.Load() - before; n != 1 {
		t.Fatalf("%d PutObject requests for one change, want 1", n)
	}
	if got2.Status.Timestamp <= got.Status.Timestamp {
		t.Errorf("timestamp %d after %d: not increasing", got2.Status.Timestamp, got.Status.Timestamp)
	}
	if data, _, _ := object(t, sh.s3, key); !bytes.Equal(data, want2) {
		t.Fatalf("object holds %q, want %q", data, want2)
	}
}

// TestTooLargeForConfigMapDeliversToS3: content whose compressed form exceeds the 1 MiB a
// ConfigMap holds is TooLarge on the configmap target and delivers fine on s3, from a git source.
func TestTooLargeForConfigMapDeliversToS3(t *testing.T) {
	sh := setup(t)
	c := sh.c
	ns := c.Namespace(t, "s3-large", nil)
	m := startManager(t, c, ns, sh.cfg)

	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	repoURL, err := remote.CreateRepo("site", "main")
	if err != nil {
		t.Fatal(err)
	}
	noise := make([]byte, 1_500_000) // random: brotli cannot bring its base64 under 1 MiB
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	big := `{"html":"` + base64.StdEncoding.EncodeToString(noise) + `"}`
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	testenv.Git(t, work, "config", "http.postBuffer", "16777216") // one request: the remote is plain http-backend
	testenv.CommitFiles(t, work, "change", map[string]string{"blocks/posts.json": big, "blocks/site.json": `{"name":"blog"}`})
	testenv.Git(t, work, "push", "-q", repoURL, "main")
	want := merged(t, map[string]string{"posts": big, "site": `{"name":"blog"}`})

	df := &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "blog", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Target: decov1.TargetConfigMap,
			Git: &decov1.GitSource{URL: repoURL, Ref: "main", Path: "blocks"}},
	}
	if err := c.Client.Create(context.Background(), df); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, df, metav1.ConditionFalse, decov1.ReasonTooLarge, nil)

	update(t, c, df, func(d *decov1.Decofile) { d.Spec.Target = decov1.TargetS3 })
	got := waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	if got.Status.RawBytes != int64(len(want)) || got.Status.GitHubCommit == "" {
		t.Fatalf("status %+v", got.Status)
	}
	data, _, err := object(t, sh.s3, df.S3ObjectKey(prefix))
	if err != nil || !bytes.Equal(data, want) {
		t.Fatalf("object: %d bytes, %v; want the %d merged bytes", len(data), err, len(want))
	}
	// The same commit again (a forced re-resolve): the commit short-circuit, no upload.
	before := m.puts.puts.Load()
	update(t, c, df, func(d *decov1.Decofile) { d.Annotations = map[string]string{"test/poke": "1"} })
	update(t, c, df, func(d *decov1.Decofile) { d.Spec.Interval = &metav1.Duration{Duration: 3 * time.Minute} })
	waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	if n := m.puts.puts.Load() - before; n != 0 {
		t.Fatalf("%d PutObject requests for an unchanged commit", n)
	}
}

// TestFlipTargets: s3 → configmap → s3. Each direction stores where the target says, never
// deletes the other store, and the webhook injects the matching form on the next admission.
func TestFlipTargets(t *testing.T) {
	sh := setup(t)
	c := sh.c
	ctx := context.Background()
	ns := c.Namespace(t, "s3-flip", nil)
	startManager(t, c, ns, sh.cfg)
	key := func(df *decov1.Decofile) string { return df.S3ObjectKey(prefix) }

	df := inlineDecofile(ns, "flip", decov1.TargetS3, map[string]string{"site": `{"v":"a"}`})
	if err := c.Client.Create(ctx, df); err != nil {
		t.Fatal(err)
	}
	a := merged(t, map[string]string{"site": `{"v":"a"}`})
	waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	if data, _, err := object(t, sh.s3, key(df)); err != nil || !bytes.Equal(data, a) {
		t.Fatalf("object %q %v", data, err)
	}
	dep := deployment(ns, "flip", "flip")
	if err := c.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}

	// → configmap with new content: the ConfigMap is written, the object stays as it was.
	update(t, c, df, func(d *decov1.Decofile) { d.Spec.Target = decov1.TargetConfigMap; setBlock("site", `{"v":"b"}`)(d) })
	b := merged(t, map[string]string{"site": `{"v":"b"}`})
	got := waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	if got.Status.S3URL != "" || got.Status.ConfigMapName != df.ConfigMapName() || got.Status.ContentHash != encode.Hash(b) {
		t.Fatalf("status after the flip to configmap %+v", got.Status)
	}
	var cm corev1.ConfigMap
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: df.ConfigMapName()}, &cm); err != nil || cm.Data[decov1.KeyJSON] != string(b) {
		t.Fatalf("ConfigMap %v: %v", cm.Data, err)
	}
	if data, _, err := object(t, sh.s3, key(df)); err != nil || !bytes.Equal(data, a) {
		t.Fatalf("object after the flip to configmap: %q %v, want the old %q kept", data, err, a)
	}
	touch(t, c, dep)
	env, stored := envOf(t, c, dep)
	if r := env[decov1.EnvRelease].Value; !strings.HasPrefix(r, "file://") || len(stored.Spec.Template.Spec.Volumes) != 1 {
		t.Fatalf("after the flip to configmap the webhook injects %s=%q with volumes %+v", decov1.EnvRelease, r, stored.Spec.Template.Spec.Volumes)
	}

	// → s3 and back to configmap with unchanged content: the object gets that content; back on
	// configmap the status names the ConfigMap again (it holds that content already) and the
	// webhook mounts it.
	update(t, c, df, func(d *decov1.Decofile) { d.Spec.Target = decov1.TargetS3 })
	got = waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	if got.Status.ConfigMapName != "" || got.Status.S3URL == "" || got.Status.ContentHash != encode.Hash(b) {
		t.Fatalf("status after the unchanged flip to s3 %+v", got.Status)
	}
	if data, _, err := object(t, sh.s3, key(df)); err != nil || !bytes.Equal(data, b) {
		t.Fatalf("object after the unchanged flip to s3: %q %v, want %q", data, err, b)
	}
	update(t, c, df, func(d *decov1.Decofile) { d.Spec.Target = decov1.TargetConfigMap })
	got = waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	if got.Status.ConfigMapName != df.ConfigMapName() || got.Status.S3URL != "" || got.Status.ContentHash != encode.Hash(b) {
		t.Fatalf("status after the unchanged flip back to configmap %+v: want configMapName %s", got.Status, df.ConfigMapName())
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: df.ConfigMapName()}, &cm); err != nil || cm.Data[decov1.KeyJSON] != string(b) {
		t.Fatalf("ConfigMap after the unchanged flip back: %v %v", cm.Data, err)
	}
	touch(t, c, dep)
	if env, stored := envOf(t, c, dep); !strings.HasPrefix(env[decov1.EnvRelease].Value, "file://") || len(stored.Spec.Template.Spec.Volumes) != 1 {
		t.Fatalf("after the unchanged flip back the webhook injects %s=%q", decov1.EnvRelease, env[decov1.EnvRelease].Value)
	}

	// → s3 again with newer content: the object is updated, the ConfigMap stays as it was.
	update(t, c, df, func(d *decov1.Decofile) { d.Spec.Target = decov1.TargetS3; setBlock("site", `{"v":"c"}`)(d) })
	cc := merged(t, map[string]string{"site": `{"v":"c"}`})
	got = waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	if got.Status.S3URL == "" || got.Status.ConfigMapName != "" || got.Status.ContentHash != encode.Hash(cc) {
		t.Fatalf("status after the flip back to s3 %+v", got.Status)
	}
	if data, _, err := object(t, sh.s3, key(df)); err != nil || !bytes.Equal(data, cc) {
		t.Fatalf("object after the flip back: %q %v, want %q", data, err, cc)
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: df.ConfigMapName()}, &cm); err != nil || cm.Data[decov1.KeyJSON] != string(b) {
		t.Fatalf("ConfigMap after the flip to s3: %v %v, want it kept with %s", cm.Data, err, b)
	}
	touch(t, c, dep)
	env, stored = envOf(t, c, dep)
	if r := env[decov1.EnvRelease].Value; r != got.Status.S3URL || len(stored.Spec.Template.Spec.Volumes) != 0 {
		t.Fatalf("after the flip to s3 the webhook injects %s=%q with volumes %+v", decov1.EnvRelease, r, stored.Spec.Template.Spec.Volumes)
	}

	// Without --s3-delete-on-finalize a deleted Decofile leaves its object to the lifecycle rule.
	if err := c.Client.Delete(ctx, dep); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Delete(ctx, get(t, c, df)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, func() error {
		var d decov1.Decofile
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(df), &d); err == nil {
			return errNotYet
		}
		return nil
	})
	if _, _, err := object(t, sh.s3, key(df)); err != nil {
		t.Fatalf("object gone without --s3-delete-on-finalize: %v", err)
	}
}

// touch updates the Deployment's template so the webhook admits it again.
func touch(t *testing.T, c *testenv.Cluster, dep client.Object) {
	t.Helper()
	patch := []byte(`{"spec":{"template":{"metadata":{"annotations":{"test/restart":"` + metav1.Now().Format("150405.000000000") + `"}}}}}`)
	if err := c.Client.Patch(context.Background(), dep, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// TestS3OutageAndRecovery: with the S3 server stopped a change fails with Ready=False
// S3Unavailable and a Warning event while status keeps the previous version; restarted, the
// controller recovers by itself (backoff retries) and the object holds the new content.
func TestS3OutageAndRecovery(t *testing.T) {
	sh := setup(t)
	c := sh.c
	ns := c.Namespace(t, "s3-outage", nil)
	srv := testenv.S3(t, true, bucket)
	setCredentials(t, srv.AccessKey, srv.SecretKey)
	cfg := s3target.Config{Bucket: bucket, Region: srv.Region, Endpoint: srv.Endpoint, PathStyle: true}
	startManager(t, c, ns, cfg)

	df := inlineDecofile(ns, "outage", decov1.TargetS3, map[string]string{"site": `{"v":1}`})
	if err := c.Client.Create(context.Background(), df); err != nil {
		t.Fatal(err)
	}
	first := waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	update(t, c, df, setBlock("site", `{"v":2}`))
	down := waitReady(t, c, df, metav1.ConditionFalse, s3target.ReasonUnavailable, nil)
	if down.Status.ContentHash != first.Status.ContentHash || down.Status.S3URL != first.Status.S3URL || down.Status.Timestamp != first.Status.Timestamp {
		t.Fatalf("status changed by a failed upload: %+v, was %+v", down.Status, first.Status)
	}
	hasEvent(t, c, df, corev1.EventTypeWarning, s3target.ReasonUnavailable, df.S3ObjectKey(""))
	// The old object is still on the server's disk (versitygw's posix backend keeps objects
	// as files: <dir>/data/<bucket>/<key>).
	onDisk, err := os.ReadFile(filepath.Join(srv.Dir, "data", bucket, filepath.FromSlash(df.S3ObjectKey(""))))
	if err != nil || !bytes.Equal(onDisk, merged(t, map[string]string{"site": `{"v":1}`})) {
		t.Fatalf("old object during the outage: %q %v", onDisk, err)
	}

	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := merged(t, map[string]string{"site": `{"v":2}`})
	waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, func(d *decov1.Decofile) error {
		if d.Status.ContentHash != encode.Hash(want) {
			return errNotYet
		}
		return nil
	})
	if data, _, err := object(t, srv, df.S3ObjectKey("")); err != nil || !bytes.Equal(data, want) {
		t.Fatalf("object after recovery %q %v", data, err)
	}
}

// TestS3Refusals: refused credentials and a missing bucket each give their own reason and a
// Warning event; the object already uploaded stays untouched.
func TestS3Refusals(t *testing.T) {
	sh := setup(t)
	c := sh.c
	ns := c.Namespace(t, "s3-refused", nil)
	good := startManager(t, c, ns, sh.cfg)
	df := inlineDecofile(ns, "refused", decov1.TargetS3, map[string]string{"site": `{"v":1}`})
	if err := c.Client.Create(context.Background(), df); err != nil {
		t.Fatal(err)
	}
	first := waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	v1 := merged(t, map[string]string{"site": `{"v":1}`})
	good.stop()

	setCredentials(t, sh.s3.AccessKey, "wrong-secret")
	bad := startManager(t, c, ns, sh.cfg)
	update(t, c, df, setBlock("site", `{"v":2}`))
	denied := waitReady(t, c, df, metav1.ConditionFalse, s3target.ReasonAccessDenied, nil)
	if denied.Status.ContentHash != first.Status.ContentHash {
		t.Fatalf("contentHash moved on a refused upload")
	}
	hasEvent(t, c, df, corev1.EventTypeWarning, s3target.ReasonAccessDenied, "s3:PutObject")
	if data, _, err := object(t, sh.s3, df.S3ObjectKey(prefix)); err != nil || !bytes.Equal(data, v1) {
		t.Fatalf("object after a refused upload: %q %v, want %q", data, err, v1)
	}
	bad.stop()

	setCredentials(t, sh.s3.AccessKey, sh.s3.SecretKey)
	missing := sh.cfg
	missing.Bucket = "no-such-bucket"
	startManager(t, c, ns, missing)
	update(t, c, df, setBlock("site", `{"v":3}`))
	waitReady(t, c, df, metav1.ConditionFalse, s3target.ReasonBucketNotFound, nil)
	hasEvent(t, c, df, corev1.EventTypeWarning, s3target.ReasonBucketNotFound, "no-such-bucket")
}

// TestDeleteOnFinalize: with DeleteOnFinalize an s3-target Decofile gets a finalizer, and
// deleting the Decofile deletes its object before the Decofile goes.
func TestDeleteOnFinalize(t *testing.T) {
	sh := setup(t)
	c := sh.c
	ns := c.Namespace(t, "s3-final", nil)
	cfg := sh.cfg
	cfg.DeleteOnFinalize = true
	withFlag := startManager(t, c, ns, cfg)
	df := inlineDecofile(ns, "gone", decov1.TargetS3, map[string]string{"site": `{"v":1}`})
	if err := c.Client.Create(context.Background(), df); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, func(d *decov1.Decofile) error {
		if !controllerutil.ContainsFinalizer(d, s3target.Finalizer) {
			return errNotYet
		}
		return nil
	})
	key := df.S3ObjectKey(prefix)
	if _, _, err := object(t, sh.s3, key); err != nil {
		t.Fatal(err)
	}
	// A last good copy, as a progressive rollout keeps one, goes with the object.
	lastGood := key + s3target.LastGoodSuffix
	if _, err := sh.s3.Client(nil).PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(lastGood), Body: strings.NewReader(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Delete(context.Background(), get(t, c, df)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, func() error {
		var d decov1.Decofile
		if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(df), &d); err == nil {
			return fmt.Errorf("Decofile still there, finalizers %v", d.Finalizers)
		}
		return nil
	})
	_, err := sh.s3.Client(nil).HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err == nil {
		t.Fatalf("object %s still exists after the Decofile was deleted", key)
	}
	if _, err := sh.s3.Client(nil).HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(lastGood)}); err == nil {
		t.Fatalf("last good copy %s still exists after the Decofile was deleted", lastGood)
	}

	// Turned off later: a Decofile still carrying the finalizer is released, its object kept.
	kept := inlineDecofile(ns, "kept", decov1.TargetS3, map[string]string{"site": `{"v":2}`})
	if err := c.Client.Create(context.Background(), kept); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, kept, metav1.ConditionTrue, decov1.ReasonS3Uploaded, func(d *decov1.Decofile) error {
		if !controllerutil.ContainsFinalizer(d, s3target.Finalizer) {
			return errNotYet
		}
		return nil
	})
	withFlag.stop()
	startManager(t, c, ns, sh.cfg)
	testenv.Eventually(t, waitFor, func() error {
		if controllerutil.ContainsFinalizer(get(t, c, kept), s3target.Finalizer) {
			return errNotYet
		}
		return nil
	})
	if err := c.Client.Delete(context.Background(), get(t, c, kept)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, func() error {
		var d decov1.Decofile
		if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(kept), &d); err == nil {
			return fmt.Errorf("Decofile still there, finalizers %v", d.Finalizers)
		}
		return nil
	})
	if _, _, err := object(t, sh.s3, kept.S3ObjectKey(prefix)); err != nil {
		t.Fatalf("object deleted with delete-on-finalize off: %v", err)
	}
}

// TestForcedReupload: an object deleted behind the operator's back comes back after the
// documented refresh (status.s3URL cleared, annotation poked), without a new timestamp.
func TestForcedReupload(t *testing.T) {
	sh := setup(t)
	c := sh.c
	ctx := context.Background()
	ns := c.Namespace(t, "s3-refresh", nil)
	m := startManager(t, c, ns, sh.cfg)
	df := inlineDecofile(ns, "lost", decov1.TargetS3, map[string]string{"site": `{"v":1}`})
	if err := c.Client.Create(ctx, df); err != nil {
		t.Fatal(err)
	}
	first := waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	key := df.S3ObjectKey(prefix)
	if _, err := sh.s3.Client(nil).DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
		t.Fatal(err)
	}
	cur := get(t, c, df)
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Status.S3URL = ""
	if err := c.Client.Status().Patch(ctx, cur, patch); err != nil {
		t.Fatal(err)
	}
	update(t, c, df, func(d *decov1.Decofile) { d.Annotations = map[string]string{"siteops.dev/refresh": "1"} })
	testenv.Eventually(t, waitFor, func() error {
		_, _, err := object(t, sh.s3, key)
		return err
	})
	got := waitReady(t, c, df, metav1.ConditionTrue, decov1.ReasonS3Uploaded, func(d *decov1.Decofile) error {
		if d.Status.S3URL == "" {
			return errNotYet
		}
		return nil
	})
	if got.Status.Timestamp != first.Status.Timestamp || got.Status.ContentHash != first.Status.ContentHash || m.puts.puts.Load() != 2 {
		t.Fatalf("re-upload changed the version: %+v (was %+v), %d uploads", got.Status, first.Status, m.puts.puts.Load())
	}
}

// TestDuplicateDeploymentIDKeepsObject: a newer s3-target Decofile with the deploymentId of an
// older one neither overwrites the object at their shared key nor, with delete-on-finalize,
// deletes it when it goes; the older one's object stays as it uploaded it.
func TestDuplicateDeploymentIDKeepsObject(t *testing.T) {
	sh := setup(t)
	c := sh.c
	ctx := context.Background()
	ns := c.Namespace(t, "s3-dup", nil)
	cfg := sh.cfg
	cfg.DeleteOnFinalize = true
	startManager(t, c, ns, cfg)

	first := inlineDecofile(ns, "shop", decov1.TargetS3, map[string]string{"site": `{"v":"first"}`})
	if err := c.Client.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, first, metav1.ConditionTrue, decov1.ReasonS3Uploaded, nil)
	want := merged(t, map[string]string{"site": `{"v":"first"}`})
	time.Sleep(1100 * time.Millisecond) // a later creationTimestamp (seconds)

	dup := inlineDecofile(ns, "shop-copy", decov1.TargetS3, map[string]string{"site": `{"v":"copy"}`})
	dup.Spec.DeploymentID = "shop"
	if err := c.Client.Create(ctx, dup); err != nil {
		t.Fatal(err)
	}
	if dup.S3ObjectKey(prefix) != first.S3ObjectKey(prefix) {
		t.Fatal("test premise: the two Decofiles share a key")
	}
	waitReady(t, c, dup, metav1.ConditionFalse, decov1.ReasonDeploymentIDConflict, nil)
	if data, _, err := object(t, sh.s3, first.S3ObjectKey(prefix)); err != nil || !bytes.Equal(data, want) {
		t.Fatalf("object after the duplicate was created: %q %v, want %q", data, err, want)
	}
	if err := c.Client.Delete(ctx, get(t, c, dup)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, func() error {
		var d decov1.Decofile
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(dup), &d); err == nil {
			return fmt.Errorf("duplicate still there, finalizers %v", d.Finalizers)
		}
		return nil
	})
	if data, _, err := object(t, sh.s3, first.S3ObjectKey(prefix)); err != nil || !bytes.Equal(data, want) {
		t.Fatalf("object after the duplicate was deleted: %q %v, want the older Decofile's %q", data, err, want)
	}
}
