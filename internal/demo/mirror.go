package demo

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/devenv"
	"github.com/siteops/siteops/internal/scheme"
)

// mirrorToGit watches the site namespace's ConfigMaps into a git repository, edits one as the
// user alice, and checks that the commit carrying the change names alice as its author.
func mirrorToGit(namespace string) func(context.Context, *devenv.Env, io.Writer) (string, error) {
	return func(ctx context.Context, env *devenv.Env, out io.Writer) (string, error) {
		repoURL, err := env.Servers.Git.CreateRepo("cluster-mirror", "main")
		if err != nil {
			return "", err
		}
		objs := []client.Object{
			&mirrorv1alpha1.GitProvider{
				ObjectMeta: metav1.ObjectMeta{Name: "local", Namespace: namespace},
				Spec: mirrorv1alpha1.GitProviderSpec{
					URL: repoURL, AllowedBranches: []string{"main"},
					Committer: mirrorv1alpha1.Committer{Name: "siteops mirror", Email: "mirror@siteops.invalid"},
				},
			},
			&mirrorv1alpha1.GitTarget{
				ObjectMeta: metav1.ObjectMeta{Name: "dev", Namespace: namespace},
				Spec: mirrorv1alpha1.GitTargetSpec{
					ProviderRef: corev1.LocalObjectReference{Name: "local"}, Branch: "main", Path: "clusters/dev",
					CommitWindow: &metav1.Duration{Duration: time.Second},
				},
			},
			&mirrorv1alpha1.WatchRule{
				ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: namespace},
				Spec: mirrorv1alpha1.WatchRuleSpec{
					TargetRef: mirrorv1alpha1.TargetReference{Name: "dev"},
					Rules:     []mirrorv1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
				},
			},
		}
		for _, o := range objs {
			if err := env.Client.Create(ctx, o); err != nil {
				return "", fmt.Errorf("create %T: %w", o, err)
			}
		}
		fmt.Fprintf(out, "    GitProvider, GitTarget and WatchRule for ConfigMaps in %s → %s\n", namespace, repoURL)

		alice, err := env.AddUser(envtest.User{Name: "alice", Groups: []string{"system:masters"}})
		if err != nil {
			return "", fmt.Errorf("provision user alice: %w", err)
		}
		ac, err := client.New(alice, client.Options{Scheme: scheme.New()})
		if err != nil {
			return "", err
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "storefront-settings", Namespace: namespace},
			Data:       map[string]string{"currency": "EUR", "banner": "winter-sale"},
		}
		if err := ac.Create(ctx, cm); err != nil {
			return "", fmt.Errorf("create ConfigMap as alice: %w", err)
		}
		fmt.Fprintf(out, "    alice created ConfigMap %s/%s\n", namespace, cm.Name)

		file := "clusters/dev/" + namespace + "/core/configmaps/" + cm.Name + ".yaml"
		gitDir := env.Servers.Git.RepoDir("cluster-mirror")
		lastCommit := func() ([]string, error) {
			log, err := exec.Command("git", "--git-dir", gitDir, "log", "-1", "--format=%an <%ae>|%cn|%s", "main", "--", file).Output()
			if err != nil || len(strings.TrimSpace(string(log))) == 0 {
				return nil, fmt.Errorf("no commit touches %s yet", file)
			}
			return strings.SplitN(strings.TrimSpace(string(log)), "|", 3), nil
		}
		// The first commit may come from the watch's initial listing, which has no author to find;
		// the edit below is a live change, so its commit must name alice.
		if err := waitFor(ctx, time.Minute, func() error { _, err := lastCommit(); return err }); err != nil {
			return "", err
		}
		cm.Data["banner"] = "new-year"
		if err := ac.Update(ctx, cm); err != nil {
			return "", fmt.Errorf("update ConfigMap as alice: %w", err)
		}
		fmt.Fprintf(out, "    alice changed the banner of %s/%s\n", namespace, cm.Name)
		var author string
		if err := waitFor(ctx, time.Minute, func() error {
			fields, err := lastCommit()
			if err != nil {
				return err
			}
			if !strings.HasPrefix(fields[2], "[UPDATE]") && !strings.Contains(fields[2], "update") {
				return fmt.Errorf("the update is not committed yet (last: %q)", fields[2])
			}
			author = fields[0]
			if !strings.HasPrefix(author, "alice") {
				return fmt.Errorf("commit %q is authored by %s, want alice", fields[2], author)
			}
			fmt.Fprintf(out, "    commit %q: author %s, committer %s\n", fields[2], author, fields[1])
			return nil
		}); err != nil {
			return "", err
		}
		content, err := exec.Command("git", "--git-dir", gitDir, "show", "main:"+file).Output()
		if err != nil {
			return "", fmt.Errorf("read %s from the mirror: %w", file, err)
		}
		if strings.Contains(string(content), "resourceVersion") || !strings.Contains(string(content), "new-year") {
			return "", fmt.Errorf("mirrored file is not the clean object:\n%s", content)
		}
		return fmt.Sprintf("%s committed by the mirror with author %s", file, author), nil
	}
}
