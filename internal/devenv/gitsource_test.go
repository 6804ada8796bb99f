package devenv_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/testenv"
)

// TestDevEnvGitSource: the source URL policy allows `siteops dev up` exactly its own git remote
// (plain HTTP on loopback); another loopback port stays refused.
func TestDevEnvGitSource(t *testing.T) {
	ctx := context.Background()
	env := devEnv(t)
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sites-git"}}); err != nil {
		t.Fatal(err)
	}
	repoURL, err := env.Servers.Git.CreateRepo("dev-git-source", "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	testenv.CommitFiles(t, work, "blocks", map[string]string{"blocks/home.json": `{"title":"dev"}`})
	testenv.Git(t, work, "push", "-q", repoURL, "main")

	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close() }()
	for name, u := range map[string]string{"allowed": repoURL, "refused": "http://" + other.Addr().String() + "/x.git"} {
		d := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sites-git"},
			Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Git: &decov1.GitSource{URL: u, Ref: "main", Path: "blocks"}}}
		if err := c.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"allowed": decov1.ReasonSucceeded, "refused": source.ReasonNotAllowed}
	for name, reason := range want {
		deadline := time.Now().Add(60 * time.Second)
		for {
			var got decov1.Decofile
			err := c.Get(ctx, client.ObjectKey{Namespace: "sites-git", Name: name}, &got)
			r := meta.FindStatusCondition(got.Status.Conditions, decov1.ConditionReady)
			if err == nil && r != nil && r.Reason == reason {
				if reason == source.ReasonNotAllowed && !strings.Contains(r.Message, "--source-allowed-hosts") {
					t.Errorf("refusal does not name the setting: %s", r.Message)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: want reason %s, have %v %+v", name, reason, err, got.Status)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
