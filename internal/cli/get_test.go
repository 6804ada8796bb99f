package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/inspect"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/testenv"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of siteops get, stats and events")

// getFixture is one namespace holding a Decofile in each state, a mirror target and rule, and
// a tenant cache user, as the controllers would have recorded them.
type getFixture struct {
	c          *testenv.Cluster
	ns         string
	kubeconfig string
}

// kubeconfigFor writes a kubeconfig that authenticates with cfg and defaults to namespace ns.
func kubeconfigFor(t testing.TB, cfg *rest.Config, ns string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: ns}
	kc.CurrentContext = "x"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

const fixtureDigest = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"

func newGetFixture(t *testing.T) *getFixture {
	t.Helper()
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "get", map[string]string{
		decov1.AnnotationValkeyACL: "true", provision.AnnotationPasswordDigest: fixtureDigest})
	f := &getFixture{c: c, ns: ns, kubeconfig: kubeconfigFor(t, c.Config, ns)}
	delivered := metav1.NewTime(time.Now().Add(-90 * time.Minute))
	f.decofile(t, "a-ready", func(st *decov1.DecofileStatus) {
		st.ContentHash, st.StoredBytes, st.Format, st.ConfigMapName = strings.Repeat("0123456789abcdef", 4), 2048, decov1.FormatJSON, "decofile-a-ready"
		st.NotifiedHash = st.ContentHash
		st.LastUpdated = &delivered
		cond(st, decov1.ConditionReady, metav1.ConditionTrue, decov1.ReasonSucceeded, "stored in ConfigMap decofile-a-ready")
		cond(st, decov1.ConditionPodsNotified, metav1.ConditionTrue, decov1.ReasonNotificationSucceeded, "Successfully notified all pods")
		st.Rollout = &decov1.RolloutStatus{Total: 3, Notified: 3}
		st.History = []decov1.RolloutRecord{
			{ID: "timestamp:2", ContentHash: st.ContentHash, Result: "Succeeded", FinishedAt: delivered, Pods: 3, PodsConfirmed: 3, Count: 1},
			{ID: "timestamp:1", ContentHash: "11", Result: "Failed", FinishedAt: delivered, Pods: 3, PodsConfirmed: 2, Count: 4}}
	})
	f.decofile(t, "b-rolling", func(st *decov1.DecofileStatus) {
		st.SourceType, st.GitHubCommit, st.ShortCommit = decov1.SourceGitHub, strings.Repeat("abc1234", 5)+"abcde", "abc1234"
		st.StoredBytes, st.Format, st.ConfigMapName, st.LastUpdated = 300<<10, decov1.FormatBin, "decofile-b-rolling", &delivered
		cond(st, decov1.ConditionReady, metav1.ConditionTrue, decov1.ReasonSucceeded, "stored")
		cond(st, decov1.ConditionPodsNotified, metav1.ConditionUnknown, decov1.ReasonNotificationInProgress, "step 2/4: 3/10 pods updated")
		st.Rollout = &decov1.RolloutStatus{Total: 10, Notified: 3, Step: 2, Steps: 4, Phase: "Pausing"}
	})
	f.decofile(t, "c-toolarge", func(st *decov1.DecofileStatus) {
		cond(st, decov1.ConditionReady, metav1.ConditionFalse, decov1.ReasonTooLarge, "the content (40.0 MiB) does not fit in a ConfigMap even compressed: use target s3")
		cond(st, decov1.ConditionStalled, metav1.ConditionTrue, decov1.ReasonTooLarge, "the content (40.0 MiB) does not fit in a ConfigMap even compressed: use target s3")
	})
	f.decofile(t, "d-new", nil)

	ctx := context.Background()
	gt := &mirrorv1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mirror"},
		Spec: mirrorv1.GitTargetSpec{ProviderRef: corev1.LocalObjectReference{Name: "git"}, Branch: "main", Path: "clusters/prod"}}
	must(t, c.Client.Create(ctx, gt))
	pushed := metav1.NewTime(time.Now().Add(-3 * time.Minute))
	gt.Status = mirrorv1.GitTargetStatus{ObservedGeneration: gt.Generation, LastPushedCommit: strings.Repeat("9f8e7d6c5b", 4), LastPushTime: &pushed,
		WatchedStreams: 2, PendingWrites: 4}
	meta.SetStatusCondition(&gt.Status.Conditions, metav1.Condition{Type: mirrorv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Pushed", Message: "watching 2 streams"})
	meta.SetStatusCondition(&gt.Status.Conditions, metav1.Condition{Type: mirrorv1.ConditionCursorsDurable, Status: metav1.ConditionFalse, Reason: "RedisUnavailable", Message: "cursors are kept in memory until Redis answers"})
	must(t, c.Client.Status().Update(ctx, gt))
	wr := &mirrorv1.WatchRule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmaps"},
		Spec: mirrorv1.WatchRuleSpec{TargetRef: mirrorv1.TargetReference{Name: "mirror"},
			Rules: []mirrorv1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}}}
	must(t, c.Client.Create(ctx, wr))
	wr.Status = mirrorv1.WatchRuleStatus{ObservedGeneration: wr.Generation, Resources: []string{"configmaps"}}
	meta.SetStatusCondition(&wr.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Watching", Message: "watching configmaps"})
	must(t, c.Client.Status().Update(ctx, wr))
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func cond(st *decov1.DecofileStatus, typ string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg})
}

// decofile creates an inline Decofile and records the status set gives it (none when nil).
func (f *getFixture) decofile(t *testing.T, name string, set func(*decov1.DecofileStatus)) {
	t.Helper()
	ctx := context.Background()
	d := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{}`)}}}}}
	must(t, f.c.Client.Create(ctx, d))
	if set == nil {
		return
	}
	d.Status.ObservedGeneration = d.Generation
	set(&d.Status)
	must(t, f.c.Client.Status().Update(ctx, d))
}

// run executes the siteops command line with the fixture's kubeconfig.
func (f *getFixture) run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runCLI(context.Background(), append(args, "--kubeconfig", f.kubeconfig)...)
}

// startCLI runs the command line until ctx ends (a watching command); done gets its error.
func startCLI(ctx context.Context, args ...string) (out *testenv.SyncBuffer, done <-chan error) {
	cmd := NewRootCommand()
	out = &testenv.SyncBuffer{}
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs(args)
	ch := make(chan error, 1)
	go func() { ch <- cmd.ExecuteContext(ctx) }()
	return out, ch
}

func runCLI(ctx context.Context, args ...string) (string, string, error) {
	cmd := NewRootCommand()
	var out, errOut testenv.SyncBuffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

var durationCell = regexp.MustCompile(`\b\d+(\.\d+)?(s|m|h|d|y)(\d+(s|m|h))?\b`)

// normalized is output with the fixture's namespace, ages and column padding made stable, so
// a golden file compares what the command says rather than how long the test took.
func normalized(out, ns string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		l = strings.ReplaceAll(l, ns, "NS")
		l = durationCell.ReplaceAllString(l, "AGE")
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n") + "\n"
}

// golden compares out with testdata/name (written as out with -update).
func golden(t *testing.T, name, out, ns string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		must(t, os.MkdirAll("testdata", 0o755))
		must(t, os.WriteFile(path, []byte(strings.ReplaceAll(out, ns, "NS")), 0o644))
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to write it): %v", err)
	}
	if got, w := normalized(out, ns), normalized(string(want), "NS"); got != w {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", name, out, want)
	}
}

func TestGetGolden(t *testing.T) {
	f := newGetFixture(t)
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"get_all.golden", []string{"get", "all"}},
		{"get_decofiles_wide.golden", []string{"get", "decofiles", "-o", "wide"}},
		{"get_failing.golden", []string{"get", "all", "--status-selector", "ready=false"}},
		{"get_one.golden", []string{"get", "df", "b-rolling"}},
	} {
		out, errOut, err := f.run(t, tc.args...)
		if err != nil || errOut != "" {
			t.Fatalf("%v: %v, stderr %q", tc.args, err, errOut)
		}
		golden(t, tc.golden, out, f.ns)
	}
	// What needs attention comes first, in every view.
	out, _, _ := f.run(t, "get", "decofiles")
	order := []string{"c-toolarge", "b-rolling", "d-new", "a-ready"}
	last := -1
	for _, name := range order {
		i := strings.Index(out, name)
		if i < last {
			t.Errorf("%s is not in order %v:\n%s", name, order, out)
		}
		last = i
	}
}

func TestGetJSONIsStableForScripts(t *testing.T) {
	f := newGetFixture(t)
	out, _, err := f.run(t, "get", "all", "-o", "json", "--status-selector", "Ready=False")
	must(t, err)
	var list summaryList
	must(t, json.Unmarshal([]byte(out), &list))
	got := map[string]inspect.State{}
	for _, s := range list.Items {
		got[s.Kind+"/"+s.Name] = s.State
	}
	want := map[string]inspect.State{"Decofile/c-toolarge": inspect.StateFailing}
	if len(got) != len(want) || got["Decofile/c-toolarge"] != inspect.StateFailing {
		t.Fatalf("ready=false selected %v, want %v", got, want)
	}
	out, _, err = f.run(t, "get", "decofile", "b-rolling", "-o", "yaml")
	must(t, err)
	for _, want := range []string{"kind: Decofile", "state: Progressing", "revision: abc1234", "confirmed: 3", "total: 10", "step: 2/4 Pausing"} {
		if !strings.Contains(out, want) {
			t.Errorf("yaml lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range [][]string{{"get", "pods"}, {"get", "all", "-o", "xml"}, {"get", "all", "--status-selector", "ready"}, {"get", "all", "--status-selector", "ready=maybe"}} {
		if _, _, err := f.run(t, bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestGetWatchShowsChanges(t *testing.T) {
	f := newGetFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := startCLI(ctx, "get", "decofiles", "-w", "--kubeconfig", f.kubeconfig)
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), "a-ready") {
			return fmt.Errorf("no table yet: %q", out.String())
		}
		return nil
	})
	// d-new gets delivered while the command watches: one new line says so.
	var d decov1.Decofile
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "d-new"}, &d))
	d.Status.ObservedGeneration, d.Status.ShortCommit = d.Generation, "feed123"
	cond(&d.Status, decov1.ConditionReady, metav1.ConditionTrue, decov1.ReasonSucceeded, "stored now")
	must(t, f.c.Client.Status().Update(ctx, &d))
	line := regexp.MustCompile(`(?m)^d-new\s+Ready\s+feed123\b`)
	testenv.Eventually(t, 10*time.Second, func() error {
		if !line.MatchString(out.String()) {
			return fmt.Errorf("no line for the delivery of d-new: %q", out.String())
		}
		return nil
	})
	// An edit that changes nothing shown (an annotation) prints no line; the deletion after it
	// does, so by then the edit has been seen.
	var a decov1.Decofile
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "a-ready"}, &a))
	a.Annotations = map[string]string{"test/touch": "1"}
	must(t, f.c.Client.Update(ctx, &a))
	must(t, f.c.Client.Delete(ctx, &d))
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := strings.Count(out.String(), "a-ready "); n != 1 {
			t.Fatalf("a-ready printed %d times, want once (an edit that changes nothing shown):\n%s", n, out.String())
		}
		if !regexp.MustCompile(`(?m)^d-new\s.*deleted$`).MatchString(out.String()) {
			return fmt.Errorf("no line for the deletion of d-new: %q", out.String())
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("get -w ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("get -w did not end with its context")
	}
}

func TestGetAsTenantShowsOnlyItsOwn(t *testing.T) {
	f := newGetFixture(t)
	tn := f.c.Tenant(t, "get-tenant", map[string]string{decov1.AnnotationValkeyACL: "true"})
	ctx := context.Background()
	own := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: tn.Namespace, Name: "mine"},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{}`)}}}}}
	must(t, tn.Client.Create(ctx, own))
	kc := kubeconfigFor(t, tn.Config, tn.Namespace)
	out, errOut, err := runCLI(ctx, "get", "all", "-A", "--kubeconfig", kc)
	if err != nil {
		t.Fatalf("get all -A as a tenant: %v (stderr %q)", err, errOut)
	}
	if !strings.Contains(out, "mine") || strings.Contains(out, f.ns) || strings.Contains(out, "a-ready") {
		t.Errorf("a tenant's get -A shows another namespace or misses its own:\n%s", out)
	}
	if !strings.Contains(out, "user "+provision.Username(tn.Namespace)+" not provisioned yet") {
		t.Errorf("a tenant's get -A lacks its own cache user:\n%s", out)
	}
	for _, want := range []string{"decofiles: cannot list in all namespaces (forbidden); showing namespace " + tn.Namespace,
		"tenants: cannot list namespaces (forbidden); showing namespace " + tn.Namespace} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q: %q", want, errOut)
		}
	}
	// Asked for another namespace outright, the API server's answer stands.
	if _, _, err := runCLI(ctx, "get", "decofiles", "-n", f.ns, "--kubeconfig", kc); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("a tenant listing another namespace: %v, want forbidden", err)
	}
}

func TestStats(t *testing.T) {
	f := newGetFixture(t)
	out, _, err := f.run(t, "stats", "-o", "json")
	must(t, err)
	var got struct {
		Kinds []inspect.KindStats `json:"kinds"`
	}
	must(t, json.Unmarshal([]byte(out), &got))
	by := map[string]inspect.KindStats{}
	for _, k := range got.Kinds {
		by[k.Kind] = k
	}
	df := by[inspect.KindDecofile]
	if df.Total != 4 || df.States[inspect.StateFailing] != 1 || df.States[inspect.StateProgressing] != 1 || df.States[inspect.StateUnknown] != 1 ||
		df.States[inspect.StateReady] != 1 || df.Bytes != 2048+300<<10 || df.Pods == nil || *df.Pods != (inspect.Pods{Confirmed: 6, Total: 13}) {
		t.Errorf("Decofile stats %+v", df)
	}
	gt := by[inspect.KindGitTarget]
	if gt.Total != 1 || gt.States[inspect.StateFailing] != 1 || gt.Pending != 4 || gt.OldestPushSeconds < 170 {
		t.Errorf("GitTarget stats %+v", gt)
	}
	if tn := by[inspect.KindTenant]; tn.Total != 1 || tn.Provisioned != 1 {
		t.Errorf("Tenant stats %+v", tn)
	}
	out, _, err = f.run(t, "stats")
	must(t, err)
	golden(t, "stats.golden", out, f.ns)
}

func TestSuspendAndResume(t *testing.T) {
	f := newGetFixture(t)
	ctx := context.Background()
	out, _, err := f.run(t, "suspend", "decofile/a-ready", "df/b-rolling")
	if err != nil || out != "decofile/a-ready suspended\ndecofile/b-rolling suspended\n" {
		t.Fatalf("suspend: %v %q", err, out)
	}
	var d decov1.Decofile
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "a-ready"}, &d))
	if !d.Spec.Suspend {
		t.Fatal("spec.suspend not set")
	}
	out, _, err = f.run(t, "get", "decofiles")
	must(t, err)
	if !regexp.MustCompile(`(?m)^a-ready\s+Suspended\s`).MatchString(out) {
		t.Errorf("get does not show the suspended Decofile:\n%s", out)
	}
	stats, _, err := f.run(t, "stats", "-o", "json")
	must(t, err)
	if !strings.Contains(stats, `"Suspended": 2`) {
		t.Errorf("stats does not count the suspended Decofiles:\n%s", stats)
	}
	if _, _, err := f.run(t, "resume", "decofile/a-ready"); err != nil {
		t.Fatal(err)
	}
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "a-ready"}, &d))
	if d.Spec.Suspend {
		t.Fatal("spec.suspend still set after resume")
	}
	out, _, err = f.run(t, "suspend", "gittarget/mirror", "watchrule/configmaps")
	if err != nil || out != "gittarget/mirror suspended\nwatchrule/configmaps suspended\n" {
		t.Fatalf("suspend the mirror kinds: %v %q", err, out)
	}
	var gt mirrorv1.GitTarget
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "mirror"}, &gt))
	var wr mirrorv1.WatchRule
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "configmaps"}, &wr))
	if !gt.Spec.Suspend || !wr.Spec.Suspend {
		t.Fatalf("spec.suspend: GitTarget %t, WatchRule %t", gt.Spec.Suspend, wr.Spec.Suspend)
	}
	out, _, err = f.run(t, "get", "all")
	must(t, err)
	for _, line := range []string{`(?m)^mirror\s+Suspended\s`, `(?m)^configmaps\s+Suspended\s`} {
		if !regexp.MustCompile(line).MatchString(out) {
			t.Errorf("get all does not show %s:\n%s", line, out)
		}
	}
	if _, _, err := f.run(t, "resume", "gittarget/mirror", "watchrule/configmaps"); err != nil {
		t.Fatal(err)
	}
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "mirror"}, &gt))
	if gt.Spec.Suspend {
		t.Fatal("GitTarget spec.suspend still set after resume")
	}
	for _, bad := range [][]string{{"suspend", "tenant/x"}, {"resume", "a-ready"}, {"suspend", "decofile/nope"}} {
		if _, _, err := f.run(t, bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
