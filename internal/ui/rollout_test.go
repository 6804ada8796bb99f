package ui_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/pkg/siteruntime"
)

// sitePods starts n Pod objects of Decofile name, each backed by a real site runtime on its own
// loopback address; pod i answers reloads (i+1)×step after they arrive, so a rollout to them
// takes visible steps.
func sitePods(t *testing.T, e *env, ns, name, token string, n int, step time.Duration) {
	t.Helper()
	for i := range n {
		rt, err := siteruntime.New(context.Background(), siteruntime.Options{Token: token})
		if err != nil {
			t.Fatal(err)
		}
		delay := time.Duration(i+1) * step
		h := rt.Handler()
		l := testenv.LoopbackListener(t)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				time.Sleep(delay)
			}
			h.ServeHTTP(w, r)
		})}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		addr := l.Addr().(*net.TCPAddr)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: ns, Labels: map[string]string{decov1.LabelDecofile: name}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site:latest",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(addr.Port)}}}}},
		}
		if err := e.c.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: addr.IP.String(), PodIPs: []corev1.PodIP{{IP: addr.IP.String()}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := e.c.Client.Status().Update(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
	}
}

// confirmedBy waits until every one of n pods confirmed the Decofile's stored content, at commit.
func (e *env) confirmedBy(t *testing.T, ns, name, commit string, n int32) *decov1.Decofile {
	t.Helper()
	d := &decov1.Decofile{}
	testenv.Eventually(t, time.Minute, func() error {
		if err := e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		st := d.Status
		if st.GitHubCommit != commit || st.Rollout == nil || st.Rollout.Notified != n || st.NotifiedHash != st.ContentHash {
			return fmt.Errorf("commit %s, rollout %+v, notified %s of %s", st.GitHubCommit, st.Rollout, st.NotifiedHash, st.ContentHash)
		}
		return nil
	})
	return d
}

// TestPushShowsItsRolloutLive: a push to a site's repository, reconciled from the page, shows
// its rollout reaching each pod on the open page, without a reload.
func TestPushShowsItsRolloutLive(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{Username: "deploy", Password: "pw"})
	repo, err := remote.CreateRepo("site", "main")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(repo)
	e := startUI(t, func(o *manager.Options) {
		o.Decofile.Delivery.SourceAllowedHosts = []string{u.Host}
		o.Decofile.Delivery.SourceAllowedSchemes = []string{"http"}
	})
	push := strings.Replace(repo, "http://", "http://deploy:pw@", 1)
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	commit := func(v int) string {
		sha := testenv.CommitFiles(t, work, fmt.Sprintf("v%d", v), map[string]string{"blocks/home.json": fmt.Sprintf(`{"v":%d}`, v)})
		testenv.Git(t, work, "push", "-q", push, "main")
		return sha
	}
	first := commit(1)
	ns := e.c.Namespace(t, "ui-rollout", nil)
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns}, StringData: map[string]string{"username": "deploy", "password": "pw"}},
		&decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
			Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Interval: &metav1.Duration{Duration: time.Hour},
				Git: &decov1.GitSource{URL: repo, Ref: "main", Path: "blocks", SecretRef: &corev1.LocalObjectReference{Name: "creds"}}}},
	} {
		if err := e.c.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	stored := e.stored(t, ns, "shop", "")
	var token corev1.Secret
	testenv.Eventually(t, 20*time.Second, func() error {
		return e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: stored.ReloadSecretName()}, &token)
	})
	if stored.Status.GitHubCommit != first {
		t.Fatalf("stored commit %s, want %s", stored.Status.GitHubCommit, first)
	}
	// The pods start now, with the first content (as a new pod loads it when it starts).
	sitePods(t, e, ns, "shop", string(token.Data[decov1.ReloadTokenKey]), 3, 1500*time.Millisecond)

	b := testenv.NewBrowser(t)
	base := e.proxy(t, "platform-admin", "system:masters")
	if status, _ := page(t, b, base, "/namespaces/"+ns+"/decofiles/shop"); status != http.StatusOK {
		t.Fatalf("site page: HTTP %d", status)
	}
	b.Do(t, chromedp.WaitVisible(chromedp.CSS("#live-status.on")))

	// Reconcile is a form: the page posts it and loads again. From that load on, record every
	// count of confirmed pods the page shows, in the same document.
	testenv.Eval[any](t, b, `window.__before = true`)
	second := commit(2)
	b.Do(t, chromedp.Click(chromedp.Search(`//button[text()="Reconcile"]`)))
	ctx, cancel := context.WithTimeout(b.Ctx, 20*time.Second)
	defer cancel()
	testenv.Eventually(t, 20*time.Second, func() error {
		// The navigation interrupts evaluations; try again until the new page answers.
		loaded, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__before === undefined && document.querySelector("#live-status.on") !== null`))
		if err != nil {
			return fmt.Errorf("the page did not load again after Reconcile: %w", err)
		}
		if !loaded {
			return errors.New("the page did not load again after Reconcile")
		}
		return nil
	})
	testenv.Eval[any](t, b, `window.__seen = [];
		new MutationObserver(() => { const p = document.getElementById("rollout-pods"); if (p) window.__seen.push(p.textContent) })
			.observe(document.getElementById("main"), {childList: true, subtree: true})`)
	e.confirmedBy(t, ns, "shop", second, 3)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelector("main").innerText.includes(%q) && document.getElementById("rollout-pods").textContent === "3/3"`, second[:7]))); err != nil {
		t.Fatalf("the page never showed commit %s confirmed by 3 pods: %v", second[:7], err)
	}
	seen := testenv.Eval[[]string](t, b, `window.__seen || []`)
	if !slices.Contains(seen, "1/3") && !slices.Contains(seen, "2/3") {
		t.Errorf("the page showed %q while the rollout reached the pods one by one; want a count between none and all", seen)
	}
	if !slices.Contains(seen, "3/3") {
		t.Errorf("the page showed %q, never all three pods", seen)
	}
	b.Screenshot(t, "site-rollout-live")
	noProblems(t, b)
}

// TestSiteShowsChangedBlocks: while a new version of a progressive site waits for its pod, the
// page compares it with the last content every pod confirmed, block by block.
func TestSiteShowsChangedBlocks(t *testing.T) {
	e := startUI(t)
	ns := e.c.Namespace(t, "ui-blocks", nil)
	d := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline,
			Inline:  inline(map[string]string{"home": `{"title":"v1"}`, "footer": `{"links":[1,2]}`, "banner": `{"sale":true}`}),
			Rollout: &decov1.RolloutSpec{Steps: []intstr.IntOrString{intstr.FromString("100%")}}}}
	if err := e.c.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	first := e.stored(t, ns, "shop", "")
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := e.c.Client.Get(t.Context(), client.ObjectKeyFromObject(d), first); err != nil {
			return err
		}
		if lg := first.Status.LastGood; lg == nil || lg.ContentHash != first.Status.ContentHash {
			return fmt.Errorf("the first content is not kept as the last good one yet: %+v", lg)
		}
		return nil
	})
	var token corev1.Secret
	if err := e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: first.ReloadSecretName()}, &token); err != nil {
		t.Fatal(err)
	}
	// One pod that takes a minute to answer: the second version waits for it.
	sitePods(t, e, ns, "shop", string(token.Data[decov1.ReloadTokenKey]), 1, time.Minute)
	patch := client.MergeFrom(first.DeepCopy())
	edited := first.DeepCopy()
	edited.Spec.Inline = inline(map[string]string{"home": `{"title":"v2"}`, "footer": `{"links":[1,2]}`, "menu": `{"items":[]}`})
	if err := e.c.Client.Patch(t.Context(), edited, patch); err != nil {
		t.Fatal(err)
	}
	second := e.stored(t, ns, "shop", first.Status.ContentHash)
	if lg := second.Status.LastGood; lg == nil || lg.ContentHash != first.Status.ContentHash {
		t.Fatalf("the last good copy moved on before the pod confirmed: %+v", lg)
	}

	b := testenv.NewBrowser(t)
	base := e.proxy(t, "platform-admin", "system:masters")
	if status, _ := page(t, b, base, "/namespaces/"+ns+"/decofiles/shop"); status != http.StatusOK {
		t.Fatalf("site page: HTTP %d", status)
	}
	rows := testenv.Eval[[]string](t, b, `Array.from(document.querySelectorAll("table.blocks tbody tr")).map(r => r.cells[0].innerText + " " + r.cells[1].innerText)`)
	want := []string{"menu added", "banner removed", "home changed", "footer same"}
	if !slices.Equal(rows, want) {
		t.Errorf("block rows %q, want %q", rows, want)
	}
	compared := testenv.Eval[string](t, b, `document.getElementById("compared").innerText`)
	if !strings.Contains(compared, second.Status.ContentHash[:12]) || !strings.Contains(compared, first.Status.ContentHash[:12]) {
		t.Errorf("the page does not say what it compared: %q", compared)
	}
	b.Screenshot(t, "site-blocks")
	noProblems(t, b)
}
