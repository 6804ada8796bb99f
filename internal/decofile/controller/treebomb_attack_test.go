package controller_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestTreeBombAsTenant: a tenant's git Decofile names a repository whose block folder holds a
// tree bomb (folders pointing 8 times at the folder below, 7 levels: 2 097 152 paths from a few
// KB). The manager refuses it at the tree-entry limit with a condition naming the flag, and
// another tenant's Decofile is delivered.
func TestTreeBombAsTenant(t *testing.T) {
	e := start(t)
	attacker := e.c.Tenant(t, "treebomb", nil)
	neighbour := e.c.Tenant(t, "treebomb-neighbour", nil)
	ctx := context.Background()

	remote := testenv.GitRemote(t, servers.GitRemoteOptions{Host: allowedGitHost})
	bombURL, err := remote.CreateRepo("bomb", "main")
	if err != nil {
		t.Fatal(err)
	}
	testenv.PushTreeBomb(t, remote.RepoDir("bomb"), "main", testenv.TreeBomb{
		Folder: "blocks/bomb", Fanout: 8, Depth: 6, Leaf: ".txt", Content: "x\n",
		Files: map[string]string{"blocks/a.json": `{"v":1}`},
	})
	_, siteURL, _ := gitRemoteOn(t, allowedGitHost, map[string]string{"blocks/a.json": `{"v":2}`})

	if err := attacker.Client.Create(ctx, gitDecofile(attacker.Namespace, "site", bombURL)); err != nil {
		t.Fatal(err)
	}
	if err := neighbour.Client.Create(ctx, gitDecofile(neighbour.Namespace, "site", siteURL)); err != nil {
		t.Fatal(err)
	}
	df := e.waitReady(t, attacker.Namespace, "site", metav1.ConditionFalse, source.ReasonLimitExceeded, nil)
	t.Log(ready(df).Message)
	for _, m := range []string{"tree entries", "--decofile-max-tree-entries"} {
		if !strings.Contains(ready(df).Message, m) {
			t.Errorf("message %q does not mention %q", ready(df).Message, m)
		}
	}
	e.waitReady(t, neighbour.Namespace, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
}
