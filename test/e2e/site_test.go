package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/cli"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/pkg/siteruntime"
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// siteServesDecofile is step 2: a Decofile from the git remote and a 3-replica Deployment of the
// site runtime annotated for injection; the kubelet mounts the ConfigMap and resolves the token's
// secretKeyRef, and each pod serves the content at its pod IP.
func (e *env) siteServesDecofile(t *testing.T) {
	ctx := context.Background()
	// Opted into cache isolation now, so the valkey-acl Secret exists before the pods start.
	e.siteNS = e.Namespace(t, "sites-shop", map[string]string{decov1alpha1.AnnotationValkeyACL: "true"})
	e.site = e.NewSiteRepo(t, "shop")
	sha := e.site.Push(t, "first content", map[string]string{
		"blocks/site.json":       `{"__resolveType": "site", "title": "Shop, first edition"}`,
		"blocks/pages/home.json": `{"__resolveType": "page", "path": "/"}`,
		"README.md":              "not a block",
	})
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: e.siteNS},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceGit,
			Git:      &decov1alpha1.GitSource{URL: e.site.URL, Ref: "main", Path: "blocks"},
			Interval: &metav1.Duration{Duration: 10 * time.Second}},
	}
	nodeenv.Must(t, e.C.Client.Create(ctx, df), "create Decofile")
	took := e.WaitDecofile(t, e.siteNS, "shop", sha, false)
	t.Logf("Decofile Ready with commit %.7s after %s", sha, took.Round(time.Millisecond))

	// Workloads created once the Secret exists start with it and are never restarted for it.
	nodeenv.WaitFor(t, 60*time.Second, "the valkey-acl Secret", func(ctx context.Context) error {
		return e.C.Client.Get(ctx, client.ObjectKey{Namespace: e.siteNS, Name: decov1alpha1.ValkeyACLSecretName}, &corev1.Secret{})
	})
	start := time.Now()
	nodeenv.Must(t, e.C.Client.Create(ctx, e.SiteDeployment(e.siteNS, "shop", "shop", 3)), "create site Deployment")
	e.sitePods = e.ReadyPods(t, e.siteNS, "shop", 3)
	t.Logf("3 site pods Ready after %s", time.Since(start).Round(time.Millisecond))

	nodeenv.Must(t, e.C.Client.Get(ctx, client.ObjectKeyFromObject(df), df), "get Decofile")
	for _, p := range e.sitePods {
		checkInjected(t, &p, df.Status.ConfigMapName, decov1alpha1.KeyJSON)
		info := nodeenv.PodInfo(t, p.Status.PodIP)
		if info.ContentHash != df.Status.ContentHash {
			t.Errorf("pod %s serves content %.12s, the Decofile's is %.12s", p.Name, info.ContentHash, df.Status.ContentHash)
		}
		if body := nodeenv.PodContent(t, p.Status.PodIP); !strings.Contains(body, "Shop, first edition") || strings.Contains(body, "not a block") {
			t.Errorf("pod %s at %s serves %.200s", p.Name, p.Status.PodIP, body)
		}
	}
}

// checkInjected checks what the webhook gave a site pod, as the kubelet ran it: the ConfigMap
// volume, DECO_RELEASE naming key, the reload token from the Decofile's Secret, and the tenant's
// Valkey credentials.
func checkInjected(t *testing.T, p *corev1.Pod, configMap, key string) {
	t.Helper()
	var vol *corev1.Volume
	for i := range p.Spec.Volumes {
		if cm := p.Spec.Volumes[i].ConfigMap; cm != nil && cm.Name == configMap {
			vol = &p.Spec.Volumes[i]
		}
	}
	if vol == nil {
		t.Fatalf("pod %s has no volume of ConfigMap %s: %+v", p.Name, configMap, p.Spec.Volumes)
	}
	c := p.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if v := env[decov1alpha1.EnvRelease].Value; v != "file://"+decov1alpha1.DefaultMountPath+"/"+key {
		t.Errorf("pod %s: %s=%q, want the mounted %s", p.Name, decov1alpha1.EnvRelease, v, key)
	}
	if ref := env[decov1alpha1.EnvReloadToken].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Key != decov1alpha1.ReloadTokenKey {
		t.Errorf("pod %s: the reload token is not a secretKeyRef: %+v", p.Name, env[decov1alpha1.EnvReloadToken])
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == vol.Name && m.MountPath == decov1alpha1.DefaultMountPath)
	}
	if !mounted {
		t.Errorf("pod %s: volume %s not mounted at %s: %+v", p.Name, vol.Name, decov1alpha1.DefaultMountPath, c.VolumeMounts)
	}
	if !envFromSecret(&c, decov1alpha1.ValkeyACLSecretName) {
		t.Errorf("pod %s: no envFrom Secret %s", p.Name, decov1alpha1.ValkeyACLSecretName)
	}
	for _, s := range p.Status.ContainerStatuses {
		if !s.Ready || s.RestartCount != 0 {
			t.Errorf("pod %s container %s: ready %v, %d restarts", p.Name, s.Name, s.Ready, s.RestartCount)
		}
	}
}

func envFromSecret(c *corev1.Container, name string) bool {
	for _, f := range c.EnvFrom {
		if f.SecretRef != nil && f.SecretRef.Name == name {
			return true
		}
	}
	return false
}

// gitEditRollsOut is step 3: a commit on the branch reaches the running pods (same pods, no
// restart) through the reload endpoint at their pod IPs, and `siteops decofile wait` for that
// commit exits 0.
func (e *env) gitEditRollsOut(t *testing.T) {
	sha := e.site.Push(t, "new title", map[string]string{
		"blocks/site.json": `{"__resolveType": "site", "title": "Shop, second edition"}`,
	})
	took := e.decofileWait(t, "shop", sha)
	t.Logf("`siteops decofile wait --for commit:%.7s` exited 0 after %s (branch polled every 10 s)", sha, took.Round(time.Millisecond))
	e.checkRolledOut(t, "shop", e.sitePods, "Shop, second edition")
}

// decofileWait runs `siteops decofile wait NAME --for commit:SHA` in this process and fails the
// test unless it exits 0.
func (e *env) decofileWait(t *testing.T, name, sha string) time.Duration {
	t.Helper()
	cmd := cli.NewRootCommand()
	out := &testenv.SyncBuffer{}
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs([]string{"decofile", "wait", name, "-n", e.siteNS, "--for", "commit:" + sha[:7],
		"--kubeconfig", e.KC, "--timeout", "90s"})
	start := time.Now()
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("siteops decofile wait %s --for commit:%.7s: %v (a non-zero exit)\n%s", name, sha, err, out)
	}
	return time.Since(start)
}

// checkRolledOut checks that the Decofile's rollout notified every pod and that each of pods
// (the same ones, not restarted) serves want.
func (e *env) checkRolledOut(t *testing.T, name string, pods []corev1.Pod, want string) {
	t.Helper()
	ctx := context.Background()
	var df decov1alpha1.Decofile
	nodeenv.Must(t, e.C.Client.Get(ctx, client.ObjectKey{Namespace: e.siteNS, Name: name}, &df), "get Decofile")
	cond := meta.FindStatusCondition(df.Status.Conditions, decov1alpha1.ConditionPodsNotified)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("PodsNotified = %+v, want True", cond)
	}
	if r := df.Status.Rollout; r == nil || int(r.Notified) < len(pods) || r.Failed != 0 {
		t.Fatalf("rollout %+v: want %d pods notified, none failed", df.Status.Rollout, len(pods))
	}
	t.Logf("PodsNotified=True (%s): %s", cond.Reason, cond.Message)
	for _, p := range pods {
		info := nodeenv.PodInfo(t, p.Status.PodIP)
		if info.ContentHash != df.Status.ContentHash || info.Reloads == 0 || info.Source != siteruntime.SourceOperator {
			t.Errorf("pod %s at %s: content %.12s from %q after %d reloads, the Decofile's is %.12s", p.Name, p.Status.PodIP, info.ContentHash, info.Source, info.Reloads, df.Status.ContentHash)
		}
		if body := nodeenv.PodContent(t, p.Status.PodIP); !strings.Contains(body, want) {
			t.Errorf("pod %s at %s serves %.200s, want %q", p.Name, p.Status.PodIP, body, want)
		}
		var now corev1.Pod
		nodeenv.Must(t, e.C.Client.Get(ctx, client.ObjectKeyFromObject(&p), &now), "get pod %s", p.Name)
		if now.UID != p.UID || now.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s was replaced or restarted: the content must arrive by reload", p.Name)
		}
	}
}

// largeContent is step 4: content above the compression threshold is stored as decofile.bin,
// and new pods admitted for it cold-start by decoding the mounted file.
func (e *env) largeContent(t *testing.T) {
	ctx := context.Background()
	blocks := nodeenv.LargeBlocks(2 * nodeenv.CompressionThreshold)
	files := map[string]string{}
	raw := 0
	for name, b := range blocks {
		files["catalog/"+name+".json"] = string(b)
		raw += len(b)
	}
	sha := e.site.Push(t, "catalog", files)
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: e.siteNS},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceGit,
			Git: &decov1alpha1.GitSource{URL: e.site.URL, Ref: sha, Path: "catalog"}},
	}
	nodeenv.Must(t, e.C.Client.Create(ctx, df), "create Decofile")
	took := e.WaitDecofile(t, e.siteNS, "catalog", sha, false)
	nodeenv.Must(t, e.C.Client.Get(ctx, client.ObjectKeyFromObject(df), df), "get Decofile")
	var cm corev1.ConfigMap
	nodeenv.Must(t, e.C.Client.Get(ctx, client.ObjectKey{Namespace: e.siteNS, Name: df.Status.ConfigMapName}, &cm), "get ConfigMap")
	if df.Status.Format != decov1alpha1.FormatBin || cm.Data[decov1alpha1.KeyBin] == "" || cm.Data[decov1alpha1.KeyJSON] != "" {
		t.Fatalf("%d bytes of blocks (threshold %d): format %q, ConfigMap keys %v; want only %s", raw, nodeenv.CompressionThreshold, df.Status.Format, keys(cm.Data), decov1alpha1.KeyBin)
	}
	t.Logf("%d bytes of blocks stored as %s (%d bytes) after %s", df.Status.RawBytes, decov1alpha1.KeyBin, df.Status.StoredBytes, took.Round(time.Millisecond))

	start := time.Now()
	nodeenv.Must(t, e.C.Client.Create(ctx, e.SiteDeployment(e.siteNS, "catalog", "catalog", 2)), "create Deployment")
	pods := e.ReadyPods(t, e.siteNS, "catalog", 2)
	t.Logf("2 pods Ready after %s", time.Since(start).Round(time.Millisecond))
	for _, p := range pods {
		checkInjected(t, &p, df.Status.ConfigMapName, decov1alpha1.KeyBin)
		// The runtime logs what it loaded from DECO_RELEASE (the mounted decofile.bin) at start.
		log, err := e.PodLog(ctx, &p)
		nodeenv.Must(t, err, "log of pod %s", p.Name)
		if want := fmt.Sprintf("content %.12s", df.Status.ContentHash); !strings.Contains(log, want) {
			t.Errorf("pod %s did not start with the stored content (%s): %q", p.Name, want, log)
		}
		if info := nodeenv.PodInfo(t, p.Status.PodIP); info.ContentHash != df.Status.ContentHash {
			t.Errorf("pod %s serves content %.12s from %q, want %.12s", p.Name, info.ContentHash, info.Source, df.Status.ContentHash)
		}
		var got map[string]json.RawMessage
		nodeenv.Must(t, json.Unmarshal([]byte(nodeenv.PodContent(t, p.Status.PodIP)), &got), "pod %s content", p.Name)
		for name, b := range blocks {
			if !jsonEqual(got[name], b) {
				t.Fatalf("pod %s: block %s differs from the committed file", p.Name, name)
			}
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// leaderFailover is step 6: the leader's pod is deleted; the other replica takes the Lease, and
// an edit still reaches the site pods.
func (e *env) leaderFailover(t *testing.T) {
	ctx := context.Background()
	leader := e.LeaseHolder(ctx)
	var other string
	for _, p := range e.ManagerPods(t) {
		if p.Name != leader {
			other = p.Name
		}
	}
	if leader == "" || other == "" {
		t.Fatalf("leader %q, other replica %q", leader, other)
	}
	nodeenv.Must(t, e.C.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.Release, Name: leader}}), "delete leader pod")
	took := nodeenv.WaitFor(t, 60*time.Second, "another replica takes the Lease", func(ctx context.Context) error {
		if h := e.LeaseHolder(ctx); h == "" || h == leader {
			return fmt.Errorf("Lease held by %q", h)
		}
		return nil
	})
	holder := e.LeaseHolder(ctx)
	t.Logf("leader %s deleted; %s holds the Lease %s later (the other replica was %s)", leader, holder, took.Round(time.Millisecond), other)

	sha := e.site.Push(t, "third title", map[string]string{
		"blocks/site.json": `{"__resolveType": "site", "title": "Shop, third edition"}`,
	})
	took = e.decofileWait(t, "shop", sha)
	t.Logf("the edit after the failover rolled out; `decofile wait` exited 0 after %s", took.Round(time.Millisecond))
	e.checkRolledOut(t, "shop", e.sitePods, "Shop, third edition")
}
