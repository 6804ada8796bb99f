package controller_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/testenv/peakmem"
)

// TestManyMembersAsTenant: a tenant's repository holds block files of tiny members. 1.5 million
// of them (7.5 MB, under the content limit) are delivered while the manager's heap grows by
// less than 128 MiB (the canonicaliser used to keep a buffer per member: about 500 MiB); 2.1
// million are refused before anything is decoded, with a TooLarge condition naming
// --decofile-max-members, while the stored content stays and the namespace's other Decofile
// is still delivered.
func TestManyMembersAsTenant(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	tn := e.c.Tenant(t, "members", nil)
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo("site", "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	pushFiles(t, work, url, map[string]string{"blocks/home.json": `{"v":1}`})

	if err := tn.Client.Create(ctx, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: tn.Namespace},
		Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Interval: &metav1.Duration{Duration: pollEvery},
			Git: &decov1.GitSource{URL: url, Ref: "main", Path: "blocks"}}}); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, tn.Namespace, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)

	const members = 1_500_000
	flat := "{" + strings.Repeat(`"":0,`, members-1) + `"":1}`
	sampler := peakmem.Start()
	second := pushFiles(t, work, url, map[string]string{"blocks/flat.json": flat})
	e.poke(t, tn.Namespace, "site")
	e.waitReady(t, tn.Namespace, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, func(d *decov1.Decofile) error {
		if d.Status.GitHubCommit != second {
			return errorf("still at %s", d.Status.GitHubCommit)
		}
		return nil
	})
	peak := sampler.Stop()
	t.Logf("%d members (%d bytes) delivered: heap +%.0f MiB, peak RSS %.0f MiB", members, len(flat), peakmem.MiB(peak.HeapGrowth()), peakmem.MiB(peak.RSS))
	if peak.HeapGrowth() > 128<<20 {
		t.Errorf("the heap grew by %.0f MiB while delivering %d members, want under 128 MiB", peakmem.MiB(peak.HeapGrowth()), members)
	}
	stored := e.configMap(t, tn.Namespace, "site").Data[decov1.KeyJSON]
	if stored != `{"flat":{"":1},"home":{"v":1}}` {
		t.Fatalf("stored %.200s", stored)
	}

	over := "[" + strings.Repeat("0,", encode.DefaultMembers) + "0]"
	third := pushFiles(t, work, url, map[string]string{"blocks/flat.json": over})
	e.poke(t, tn.Namespace, "site")
	df := e.waitReady(t, tn.Namespace, "site", metav1.ConditionFalse, decov1.ReasonTooLarge, nil)
	if msg := ready(df).Message; !strings.Contains(msg, "--decofile-max-members") || !strings.Contains(msg, "2000000") {
		t.Fatalf("the condition does not name the bound: %s", msg)
	}
	if df.Status.GitHubCommit == third {
		t.Fatalf("status names the refused commit as delivered")
	}
	if got := e.configMap(t, tn.Namespace, "site").Data[decov1.KeyJSON]; got != stored {
		t.Fatalf("content lost after the refusal: %.200s", got)
	}
	if err := tn.Client.Create(ctx, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: tn.Namespace},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"home": `{"v":2}`})}}); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, tn.Namespace, "other", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	if got := e.configMap(t, tn.Namespace, "other").Data; got[decov1.KeyJSON] != `{"home":{"v":2}}` {
		t.Fatalf("the namespace's other Decofile: %v", got)
	}
}
