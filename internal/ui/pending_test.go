package ui_test

import (
	"fmt"
	"html"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestGitTargetPageShowsPendingChanges runs the manager with the mirror part (author attribution
// from the API server's audit events) and the UI. While the git remote refuses every request, a
// ConfigMap alice creates cannot be pushed: the GitTarget's page, read through the
// authenticating proxy, lists it under its pending changes (the file, write, the object, alice
// as the author the commit will name, exact_user). Once the remote serves again and the change
// is pushed, the page no longer lists it.
func TestGitTargetPageShowsPendingChanges(t *testing.T) {
	m := startMirrorUI(t, "ui-pending")
	c, ctx, ns, bare, base, pagePath, dir, remote := m.c, t.Context(), m.ns, m.bare, m.base, m.pagePath, m.dir, m.remote

	// The writer opened the remote and pushed the first object: nothing is pending.
	waitGitFile(t, bare, dir+"sentinel.yaml")
	testenv.Eventually(t, 30*time.Second, func() error {
		if rows := pendingRows(fetchPage(t, base+pagePath)); len(rows) != 1 || !strings.Contains(rows[0], `class="empty"`) {
			return fmt.Errorf("the pending changes are not empty yet: %q", rows)
		}
		return nil
	})

	remote.SetFault(&servers.GitFault{Refuse: true})
	alice := c.UserClient(t, "alice", "system:masters")
	if err := alice.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"color": "blue"}}); err != nil {
		t.Fatal(err)
	}
	file := dir + "app.yaml"
	var row string
	testenv.Eventually(t, 30*time.Second, func() error {
		row = ""
		for _, r := range pendingRows(fetchPage(t, base+pagePath)) {
			if strings.Contains(r, "<code>"+file+"</code>") {
				row = r
			}
		}
		if row == "" {
			return fmt.Errorf("the page does not list %s as pending", file)
		}
		return nil
	})
	for _, want := range []string{">write<", ">ConfigMap " + ns + "/app<", html.EscapeString("alice <alice@users.noreply.invalid>"), ">exact_user<", "s ago<"} {
		if !strings.Contains(row, want) {
			t.Errorf("the pending change's row lacks %q:\n%s", want, row)
		}
	}
	if exec.Command("git", "--git-dir", bare, "cat-file", "-e", "main:"+file).Run() == nil {
		t.Fatalf("%s is on main while the remote refuses pushes", file)
	}

	remote.SetFault(nil)
	waitGitFile(t, bare, file)
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, r := range pendingRows(fetchPage(t, base+pagePath)) {
			if strings.Contains(r, file) {
				return fmt.Errorf("the page still lists the pushed %s as pending", file)
			}
		}
		return nil
	})
}

// pendingRows are the body rows of the page's pending changes table.
func pendingRows(page string) []string {
	start := strings.Index(page, `<table class="pending">`)
	if start < 0 {
		return nil
	}
	table := page[start:]
	table = table[:strings.Index(table, "</table>")]
	body := table[strings.Index(table, "<tbody>")+len("<tbody>"):]
	return strings.Split(body, "<tr>")[1:]
}
