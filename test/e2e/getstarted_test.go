package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// The names docs/get-started.md uses.
const (
	getStartedPage = "docs/get-started.md"
	pageReleaseNS  = "siteops-system"
	pageSiteNS     = "shop"
	pageMirrorFile = "clusters/prod/shop/core/configmaps/settings.yaml"
)

// getStarted is step 1: every command of docs/get-started.md, in order, in one bash as a
// reader would run them, with the reader's variables pointing at this cluster's servers: the
// images pushed to a registry the node pulls from, the chart installed with helm, a tenant
// namespace with its cache user, a site from git on pods, a push going live, a mirrored commit.
// Between the page's blocks the test adds only what this cluster needs (ClusterValues: the API
// server's audit certificate, plain-HTTP git) and takes the release over for the later steps.
func (e *env) getStarted(t *testing.T) {
	ctx := context.Background()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	nodeenv.Must(t, err, "module root")
	blocks := shellBlocks(t, filepath.Join(root, getStartedPage))

	reg := testenv.Registry(e.T, servers.RegistryOptions{Addr: net.JoinHostPort(e.N.IP, "0")}).Host
	nodeenv.Must(t, e.N.AllowPlainHTTPRegistry(reg), "let the node pull from the registry")
	site := e.NewSiteRepo(t, "getstarted-site")
	site.Push(t, "first content", map[string]string{
		"blocks/site.json":       `{"__resolveType": "site", "title": "Hello from git"}`,
		"blocks/pages/home.json": `{"__resolveType": "page", "path": "/"}`,
	})
	mirrorURL, err := e.Git.CreateRepo("getstarted-cluster", "main")
	nodeenv.Must(t, err, "create the mirror repository")
	// Registered before the release is: deleted after the uninstall.
	e.T.Cleanup(func() {
		_ = e.C.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pageReleaseNS}})
	})
	e.TrackNamespace(pageSiteNS)

	registry := reg + "/platform"
	dir := t.TempDir()
	vars := map[string]string{
		"SITEOPS_SRC":           root,
		"REGISTRY":              registry,
		"INSECURE":              "1", // the registry is plain HTTP
		"VALKEY_SENTINELS":      strings.Join(e.ValkeySet.SentinelAddrs(), ","),
		"VALKEY_MASTER":         e.ValkeySet.MasterName,
		"VALKEY_PASSWORD":       e.ValkeyPassword,
		"MIRROR_REDIS_ADDR":     e.Redis.Addr,
		"MIRROR_REDIS_PASSWORD": e.RedisPassword,
		"GIT_HOST":              e.N.IP,
		"SITE_GIT_URL":          site.URL,
		"MIRROR_GIT_URL":        mirrorURL,
		"KUBECONFIG":            e.KC,
	}
	hooks := []pageHook{
		{after: "cat > values.yaml", run: func(t *testing.T) {
			over := nodeenv.ClusterValues()
			over["flags"].(map[string]any)["notify-pod-timeout"] = notifyPodTimeout
			mergeValues(t, filepath.Join(dir, "values.yaml"), over)
			e.CreateAuditSecret(t, pageReleaseNS)
		}},
		{after: "helm upgrade --install", run: func(t *testing.T) { e.Installed(t, pageReleaseNS) }},
	}
	start := time.Now()
	runPage(t, dir, pageEnv(t, vars), blocks, hooks)
	t.Logf("the %d blocks of %s ran in %s", len(blocks), getStartedPage, time.Since(start).Round(time.Millisecond))

	// The manager and the site pods run the images the page pushed, pulled by the node. The
	// later steps use them too: containerd's CRI no longer finds an imported image by its
	// imported name once the same image was pulled under another.
	_, tag, _ := strings.Cut(e.SiteRef, ":")
	e.SiteRef = registry + "/siteops-site:" + tag
	for _, p := range e.ManagerPods(t) {
		if img := p.Spec.Containers[0].Image; !strings.HasPrefix(img, registry+"/siteops-manager:") {
			t.Errorf("manager pod %s runs %s, not the image pushed to %s", p.Name, img, registry)
		}
	}
	head, err := nodeenv.GitOut(e.Git.RepoDir("getstarted-site"), "rev-parse", "main")
	nodeenv.Must(t, err, "the site repository's head")
	head = strings.TrimSpace(head)
	nodeenv.Must(t, e.DecofileAt(ctx, pageSiteNS, "site", head, true), "Decofile site at the page's push, PodsNotified")
	var df decov1alpha1.Decofile
	nodeenv.Must(t, e.C.Client.Get(ctx, client.ObjectKey{Namespace: pageSiteNS, Name: "site"}, &df), "get Decofile")
	pods := e.ReadyPods(t, pageSiteNS, "site", 2)
	for _, p := range pods {
		if img := p.Spec.Containers[0].Image; !strings.HasPrefix(img, registry+"/siteops-site:") {
			t.Errorf("site pod %s runs %s, not the image pushed to %s", p.Name, img, registry)
		}
		if info := nodeenv.PodInfo(t, p.Status.PodIP); info.ContentHash != df.Status.ContentHash || info.Reloads == 0 {
			t.Errorf("pod %s: content %.12s after %d reloads, the Decofile's is %.12s", p.Name, info.ContentHash, info.Reloads, df.Status.ContentHash)
		}
		if body := nodeenv.PodContent(t, p.Status.PodIP); !strings.Contains(body, "Hello from git, second edition") {
			t.Errorf("pod %s serves %.200s, want the page's push", p.Name, body)
		}
	}
	if c := meta.FindStatusCondition(df.Status.Conditions, decov1alpha1.ConditionPodsNotified); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("PodsNotified %+v", c)
	}

	// The namespace's cache user authenticates on the master the Sentinels name.
	var creds corev1.Secret
	nodeenv.Must(t, e.C.Client.Get(ctx, client.ObjectKey{Namespace: pageSiteNS, Name: decov1alpha1.ValkeyACLSecretName}, &creds), "get the valkey-acl Secret")
	user := string(creds.Data[decov1alpha1.ValkeyACLUsernameKey])
	r := redis.NewClient(&redis.Options{Addr: e.Valkey.Addr, Username: user, Password: string(creds.Data[decov1alpha1.ValkeyACLPasswordKey])})
	defer r.Close()
	if err := r.Set(ctx, user+":getstarted", "ok", time.Minute).Err(); err != nil {
		t.Errorf("the cache user %s of namespace %s cannot write its own key: %v", user, pageSiteNS, err)
	}
	if !envFromSecret(&pods[0].Spec.Containers[0], decov1alpha1.ValkeyACLSecretName) {
		t.Errorf("site pod %s was not given the valkey-acl Secret", pods[0].Name)
	}

	// The mirrored ConfigMap, authored by the admin who created it (the audit webhook's fact).
	bare := e.Git.RepoDir("getstarted-cluster")
	nodeenv.Must(t, nodeenv.GitFileHas(bare, pageMirrorFile, "color: green"), "the page's ConfigMap in the mirror")
	log, err := nodeenv.GitOut(bare, "log", "-1", "--format=%an|%cn", "main", "--", pageMirrorFile)
	nodeenv.Must(t, err, "git log")
	author, committer, _ := strings.Cut(strings.TrimSpace(log), "|")
	if committer != "siteops mirror" || author == "" || author == committer {
		t.Errorf("the mirrored ConfigMap's commit: author %q, committer %q; want the user who created it as author", author, committer)
	}
	t.Logf("mirrored %s: author %s, committer %s", pageMirrorFile, author, committer)
}

// pageBlock is one ```sh block of a page and the line it starts on.
type pageBlock struct {
	line int
	text string
}

// shellBlocks are the page's ```sh blocks, in order.
func shellBlocks(t *testing.T, page string) []pageBlock {
	t.Helper()
	data, err := os.ReadFile(page)
	nodeenv.Must(t, err, "read %s", page)
	var blocks []pageBlock
	var cur *pageBlock
	for i, l := range strings.Split(string(data), "\n") {
		switch {
		case cur == nil && l == "```sh":
			cur = &pageBlock{line: i + 2}
		case cur != nil && l == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		}
	}
	if len(blocks) == 0 || cur != nil {
		t.Fatalf("%s: %d shell blocks, one unclosed: %v", page, len(blocks), cur != nil)
	}
	return blocks
}

// pageHook runs after the one block containing after.
type pageHook struct {
	after string
	run   func(*testing.T)
}

// runPage runs blocks in order in one bash (set -euo pipefail) in dir with env, so variables
// carry from block to block as in a reader's shell, and runs each hook after its block: bash
// says on fd 3 that a block is done and waits on fd 4 for the test to go on.
func runPage(t *testing.T, dir string, env []string, blocks []pageBlock, hooks []pageHook) {
	t.Helper()
	after := map[int][]pageHook{}
	for _, h := range hooks {
		var at []int
		for i, b := range blocks {
			if strings.Contains(b.text, h.after) {
				at = append(at, i)
			}
		}
		if len(at) != 1 {
			t.Fatalf("%q is in blocks %v of %s, want exactly one: the page changed under the test", h.after, at, getStartedPage)
		}
		after[at[0]] = append(after[at[0]], h)
	}
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for i, b := range blocks {
		fmt.Fprintf(&script, "printf '\\n### %s:%d\\n'\n%secho %d >&3; read -r _ <&4\n", getStartedPage, b.line, b.text, i)
	}

	doneR, doneW, err := os.Pipe()
	nodeenv.Must(t, err, "pipe")
	goR, goW, err := os.Pipe()
	nodeenv.Must(t, err, "pipe")
	defer doneR.Close()
	defer goW.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir, cmd.Env = dir, env
	out := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{doneW, goR}
	cmd.WaitDelay = 5 * time.Second
	nodeenv.Must(t, cmd.Start(), "start bash")
	doneW.Close()
	goR.Close()
	ran := -1
	var took strings.Builder
	defer func() {
		_ = cmd.Process.Kill()
		t.Logf("output of the page's commands:\n%s", out)
		t.Logf("time of each block:\n%s", took.String())
	}()
	lines := bufio.NewScanner(doneR)
	last := time.Now()
	for lines.Scan() {
		var i int
		if _, err := fmt.Sscan(lines.Text(), &i); err != nil {
			t.Fatalf("bash said %q on fd 3", lines.Text())
		}
		ran = i
		fmt.Fprintf(&took, "%s:%-4d %6.1fs\n", getStartedPage, blocks[i].line, time.Since(last).Seconds())
		for _, h := range after[i] {
			h.run(t)
		}
		if _, err := io.WriteString(goW, "\n"); err != nil {
			t.Fatalf("tell bash to go on: %v", err)
		}
		last = time.Now()
	}
	if err := cmd.Wait(); err != nil {
		next := blocks[min(ran+1, len(blocks)-1)]
		t.Fatalf("the block at %s:%d failed: %v", getStartedPage, next.line, err)
	}
	if ran != len(blocks)-1 {
		t.Fatalf("bash ran %d of %d blocks", ran+1, len(blocks))
	}
}

// pageEnv is the reader's environment: this process's, with vars, a HOME of its own (helm's,
// kubectl's and git's files stay in the test's folder; Go's caches do not move), kubectl and helm
// from the test tools, the go install folder (in the user's cache folder) first on PATH, and no
// make variables of the make running the tests.
func pageEnv(t *testing.T, vars map[string]string) []string {
	t.Helper()
	goenv, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	nodeenv.Must(t, err, "go env")
	dirs := strings.Fields(string(goenv))
	if len(dirs) != 3 {
		t.Fatalf("go env: %q", goenv)
	}
	home := t.TempDir()
	// Kept between runs, like the test tools: go install links the CLI again only when its
	// sources changed.
	cache, err := os.UserCacheDir()
	nodeenv.Must(t, err, "cache folder")
	gobin := filepath.Join(cache, "siteops", "get-started-bin")
	tools := os.Getenv("KUBEBUILDER_ASSETS")
	for _, tool := range []string{"kubectl", "helm"} {
		if _, err := os.Stat(filepath.Join(tools, tool)); err != nil {
			t.Fatalf("%s is not in $KUBEBUILDER_ASSETS (%s): run make node-tools", tool, tools)
		}
	}
	env := []string{"HOME=" + home, "GOBIN=" + gobin, "PATH=" + gobin + ":" + tools + ":" + os.Getenv("PATH"),
		"GOCACHE=" + dirs[0], "GOMODCACHE=" + dirs[1], "GOPATH=" + dirs[2],
		"GIT_AUTHOR_NAME=Site Developer", "GIT_AUTHOR_EMAIL=dev@example.com",
		"GIT_COMMITTER_NAME=Site Developer", "GIT_COMMITTER_EMAIL=dev@example.com"}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "HOME", "GOBIN", "PATH", "GOCACHE", "GOMODCACHE", "GOPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "XDG_CONFIG_HOME":
		default:
			if _, set := vars[k]; !set {
				env = append(env, kv)
			}
		}
	}
	return env
}

// mergeValues writes over into the values file, over taking precedence.
func mergeValues(t *testing.T, file string, over map[string]any) {
	t.Helper()
	b, err := os.ReadFile(file)
	nodeenv.Must(t, err, "read %s", file)
	var page map[string]any
	nodeenv.Must(t, yaml.Unmarshal(b, &page), "parse %s", file)
	merged, err := yaml.Marshal(chartutil.CoalesceTables(over, page))
	nodeenv.Must(t, err, "values")
	nodeenv.Must(t, os.WriteFile(file, merged, 0o600), "write %s", file)
	t.Logf("%s with what this cluster adds:\n%s", filepath.Base(file), merged)
}
