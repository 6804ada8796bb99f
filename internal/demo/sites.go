package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/devenv"
	"github.com/siteops/siteops/pkg/siteruntime"
)

// site is the state the Decofile steps share: the site's namespace, its git work tree, and its
// pods (real pods on a node, or site-runtime processes standing in for them).
type site struct {
	namespace, name string
	repoURL, work   string
	pods            []*sitePod
}

// sitePod is one pod of the site, reached at addr: a real pod (node set), or a site runtime
// serving on its own loopback address (server set).
type sitePod struct {
	name   string
	addr   string
	node   string
	server *http.Server
}

func (s *site) stop() {
	for _, p := range s.pods {
		if p.server != nil {
			_ = p.server.Close()
		}
	}
}

// gitSourcedDecofile pushes two block files to the local git remote and creates a Decofile that
// reads them; the operator must store them in a ConfigMap.
func (s *site) gitSourcedDecofile(ctx context.Context, env *devenv.Env, out io.Writer) (string, error) {
	var err error
	if s.repoURL, err = env.Servers.Git.CreateRepo("site-"+s.name, "main"); err != nil {
		return "", err
	}
	s.work = filepath.Join(env.StateDir, "site-work")
	_ = os.RemoveAll(s.work)
	if err := git("", "clone", "--quiet", s.repoURL, s.work); err != nil {
		return "", err
	}
	if err := s.commitBlocks(map[string]string{
		"Header.json":                    `{"logo":"/logo.svg","links":["Home","Blog"]}`,
		"pages/Home.json":                `{"title":"Welcome & hello","sections":["Hero","Shelf"]}`,
		"Campaign%20Timer%20-%2001.json": `{"ends":"2026-12-24T00:00:00Z"}`,
	}, "first content"); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "    pushed 3 block files to %s\n", s.repoURL)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.namespace}}
	if err := env.Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return "", err
	}
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace},
		Spec: decov1alpha1.DecofileSpec{
			Source:   decov1alpha1.SourceGit,
			Git:      &decov1alpha1.GitSource{URL: s.repoURL, Ref: "main", Path: ".deco/blocks"},
			Interval: &metav1.Duration{Duration: 10 * time.Second},
		},
	}
	if err := env.Client.Create(ctx, df); err != nil {
		return "", fmt.Errorf("create Decofile: %w", err)
	}
	head, err := s.head()
	if err != nil {
		return "", err
	}
	if err := waitFor(ctx, time.Minute, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(df), df); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(df.Status.Conditions, decov1alpha1.ConditionReady) || df.Status.GitHubCommit != head {
			return fmt.Errorf("decofile not Ready at commit %s: %+v", head, df.Status.Conditions)
		}
		return nil
	}); err != nil {
		return "", err
	}
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: df.ConfigMapName()}, cm); err != nil {
		return "", fmt.Errorf("read the Decofile's ConfigMap: %w", err)
	}
	var blocks map[string]json.RawMessage
	if err := json.Unmarshal([]byte(cm.Data[decov1alpha1.KeyJSON]), &blocks); err != nil {
		return "", fmt.Errorf("ConfigMap %s holds no valid %s: %w", cm.Name, decov1alpha1.KeyJSON, err)
	}
	for _, want := range []string{"Header", "Home", "Campaign Timer - 01"} {
		if _, ok := blocks[want]; !ok {
			return "", fmt.Errorf("block %q missing from the ConfigMap (has %d blocks)", want, len(blocks))
		}
	}
	fmt.Fprintf(out, "    ConfigMap %s/%s: %s with blocks Header, Home (from pages/), \"Campaign Timer - 01\"; timestamp %s\n",
		s.namespace, cm.Name, decov1alpha1.KeyJSON, cm.Data[decov1alpha1.KeyTimestamp])
	return fmt.Sprintf("Decofile %s Ready at commit %s, %d bytes in ConfigMap %s", s.name, short(head), df.Status.StoredBytes, cm.Name), nil
}

// injectedPods creates an annotated Deployment, checks what the webhook injected, and checks
// that its three pods serve the Decofile: real pods of the site image on a node, or, without one,
// site runtimes started here from the injected pod template and registered as Running pods.
func (s *site) injectedPods(ctx context.Context, env *devenv.Env, out io.Writer) (string, error) {
	locals := []string{"127.0.0.21", "127.0.0.22", "127.0.0.23"}
	port := sitePort
	if env.Node == nil {
		var err error
		if port, err = freePortOnAll(locals); err != nil {
			return "", err
		}
	}
	deploy := siteDeployment(env, s.namespace, s.name, s.name, 3, port)
	if err := env.Client.Create(ctx, deploy); err != nil {
		return "", fmt.Errorf("create Deployment: %w", err)
	}
	tmpl := deploy.Spec.Template
	app := tmpl.Spec.Containers[0]
	release := envValue(app, decov1alpha1.EnvRelease)
	if !strings.HasPrefix(release, "file://") || tmpl.Labels[decov1alpha1.LabelDecofile] != s.name || len(tmpl.Spec.Volumes) == 0 {
		return "", fmt.Errorf("webhook did not inject the Decofile: DECO_RELEASE=%q labels=%v volumes=%d", release, tmpl.Labels, len(tmpl.Spec.Volumes))
	}
	tokenRef := envFrom(app, decov1alpha1.EnvReloadToken)
	if tokenRef == nil || tokenRef.SecretKeyRef == nil {
		return "", errors.New("reload token is not injected from a Secret")
	}
	fmt.Fprintf(out, "    webhook injected: DECO_RELEASE=%s, volume %s, %s from Secret %s\n",
		release, tmpl.Spec.Volumes[0].Name, decov1alpha1.EnvReloadToken, tokenRef.SecretKeyRef.Name)

	if env.Node != nil {
		pods, err := runningPods(ctx, env, deploy, 3)
		if err != nil {
			return "", err
		}
		s.pods = pods
	} else {
		token := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: tokenRef.SecretKeyRef.Name}, token); err != nil {
			return "", fmt.Errorf("read reload token Secret: %w", err)
		}
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: "decofile-" + s.name}, cm); err != nil {
			return "", err
		}
		mountPath := filepath.Dir(strings.TrimPrefix(release, "file://"))
		for i, ip := range locals {
			p, err := s.startPod(ctx, env, fmt.Sprintf("%s-%d", s.name, i), net.JoinHostPort(ip, strconv.Itoa(port)), tmpl, cm, mountPath, release, string(token.Data[tokenRef.SecretKeyRef.Key]))
			if err != nil {
				return "", err
			}
			s.pods = append(s.pods, p)
		}
	}
	for _, p := range s.pods {
		content, err := p.content(ctx)
		if err != nil {
			return "", err
		}
		if !strings.Contains(content, "Welcome & hello") {
			return "", fmt.Errorf("pod %s does not serve the Decofile's content", p.name)
		}
		where := "local process"
		if p.node != "" {
			where = "node " + p.node
		}
		fmt.Fprintf(out, "    pod %s running at %s (%s) serving %d bytes\n", p.name, p.addr, where, len(content))
	}
	if env.Node != nil {
		return fmt.Sprintf("3 real pods of %s injected with %s (mounted ConfigMap, token from Secret) serving the Decofile at their pod IPs",
			env.Images[devenv.SiteImage].Ref, decov1alpha1.EnvRelease), nil
	}
	return fmt.Sprintf("3 pods (local processes) injected with %s and serving the Decofile", decov1alpha1.EnvRelease), nil
}

// startPod plays the kubelet for one pod: it materialises the ConfigMap volume into a folder, starts
// a site runtime from the pod's environment, and records the pod as Running at its address.
func (s *site) startPod(ctx context.Context, env *devenv.Env, name, addr string, tmpl corev1.PodTemplateSpec, cm *corev1.ConfigMap, mountPath, release, token string) (*sitePod, error) {
	dir := filepath.Join(env.StateDir, "pods", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			return nil, err
		}
	}
	rt, err := siteruntime.New(ctx, siteruntime.Options{Release: "file://" + filepath.Join(dir, filepath.Base(strings.TrimPrefix(release, "file://"+mountPath))), Token: token})
	if err != nil {
		return nil, fmt.Errorf("start site runtime for %s: %w", name, err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: rt.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.namespace, Labels: tmpl.Labels, Annotations: tmpl.Annotations},
		Spec:       tmpl.Spec,
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	host, _, _ := net.SplitHostPort(addr)
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: host, PodIPs: []corev1.PodIP{{IP: host}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("mark pod %s running: %w", name, err)
	}
	return &sitePod{name: name, addr: addr, server: srv}, nil
}

// editAndRollout pushes a change, lets the operator deliver it and notify every pod, and confirms
// it with `siteops decofile wait`.
func (s *site) editAndRollout(run Runner) func(context.Context, *devenv.Env, io.Writer) (string, error) {
	return func(ctx context.Context, env *devenv.Env, out io.Writer) (string, error) {
		// From now on the Decofile polls only every hour: what delivers the edit is the push
		// event the git remote sends the operator after the push.
		if err := s.pollEvery(ctx, env, time.Hour); err != nil {
			return "", err
		}
		pushed := time.Now()
		if err := s.commitBlocks(map[string]string{"pages/Home.json": `{"title":"Winter sale & more","sections":["Hero","Shelf","Countdown"]}`}, "winter sale"); err != nil {
			return "", err
		}
		head, err := s.head()
		if err != nil {
			return "", err
		}
		fmt.Fprintf(out, "    pushed commit %s; running: siteops decofile wait %s -n %s --for commit:%s\n", short(head), s.name, s.namespace, short(head))
		start := time.Now()
		if err := run(ctx, indent(out), "decofile", "wait", s.name, "-n", s.namespace, "--for", "commit:"+head, "--timeout", "2m", "--kubeconfig", env.KubeconfigPath); err != nil {
			return "", fmt.Errorf("siteops decofile wait: %w", err)
		}
		df := &decov1alpha1.Decofile{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: s.name}, df); err != nil {
			return "", err
		}
		for _, p := range s.pods {
			info, err := p.info(ctx)
			if err != nil {
				return "", err
			}
			if info.ContentHash != df.Status.ContentHash {
				return "", fmt.Errorf("pod %s serves content %s, want %s", p.name, info.ContentHash, df.Status.ContentHash)
			}
			if content, err := p.content(ctx); err != nil || !strings.Contains(content, "Winter sale & more") {
				return "", fmt.Errorf("pod %s does not serve the edit: %w", p.name, err)
			}
		}
		if sent, err := env.Servers.Git.PushEvents(); sent == 0 {
			return "", fmt.Errorf("the git remote sent no push event: %w", err)
		}
		return fmt.Sprintf("commit %s on all %d pods %s after the push, the Decofile polling every hour: the push event delivered it (PodsNotified=True; decofile wait %s)",
			short(head), len(s.pods), time.Since(pushed).Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond)), nil
	}
}

// pollEvery sets the Decofile's spec.interval.
func (s *site) pollEvery(ctx context.Context, env *devenv.Env, every time.Duration) error {
	df := &decov1alpha1.Decofile{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: s.name}, df); err != nil {
		return err
	}
	orig := df.DeepCopy()
	df.Spec.Interval = &metav1.Duration{Duration: every}
	if err := env.Client.Patch(ctx, df, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("set the Decofile's interval: %w", err)
	}
	return nil
}

func (s *site) commitBlocks(files map[string]string, msg string) error {
	for name, body := range files {
		p := filepath.Join(s.work, ".deco", "blocks", filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	if err := git(s.work, "add", "-A"); err != nil {
		return err
	}
	if err := git(s.work, "-c", "user.name=Site Editor", "-c", "user.email=editor@example.com", "commit", "--quiet", "-m", msg); err != nil {
		return err
	}
	return git(s.work, "push", "--quiet", "origin", "HEAD:main")
}

func (s *site) head() (string, error) {
	out, err := exec.Command("git", "-C", s.work, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func git(dir string, args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func envFrom(c corev1.Container, name string) *corev1.EnvVarSource {
	for _, e := range c.Env {
		if e.Name == name {
			return e.ValueFrom
		}
	}
	return nil
}

func freePortOnAll(hosts []string) (int, error) {
	for attempt := 0; attempt < 20; attempt++ {
		l, err := net.Listen("tcp", hosts[0]+":0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok := true
		for _, h := range hosts[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return port, nil
		}
	}
	return 0, errors.New("no port free on every site address")
}

func waitFor(ctx context.Context, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

func ptr[T any](v T) *T { return &v }

// flipTargets moves the Decofile to the S3 target, fetches it anonymously from the URL pods
// load, cold-starts a pod from it, and moves it back to the ConfigMap.
func (s *site) flipTargets(ctx context.Context, env *devenv.Env, out io.Writer) (string, error) {
	key := client.ObjectKey{Namespace: s.namespace, Name: s.name}
	setTarget := func(t decov1alpha1.TargetType) error {
		df := &decov1alpha1.Decofile{}
		if err := env.Client.Get(ctx, key, df); err != nil {
			return err
		}
		df.Spec.Target = t
		return env.Client.Update(ctx, df)
	}
	readyWith := func(reason string) (*decov1alpha1.Decofile, error) {
		df := &decov1alpha1.Decofile{}
		err := waitFor(ctx, time.Minute, func() error {
			if err := env.Client.Get(ctx, key, df); err != nil {
				return err
			}
			c := meta.FindStatusCondition(df.Status.Conditions, decov1alpha1.ConditionReady)
			if df.Status.ObservedGeneration != df.Generation || c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
				return fmt.Errorf("decofile not Ready with reason %s: %+v", reason, c)
			}
			return nil
		})
		return df, err
	}

	if err := setTarget(decov1alpha1.TargetS3); err != nil {
		return "", fmt.Errorf("switch to the s3 target: %w", err)
	}
	df, err := readyWith(decov1alpha1.ReasonS3Uploaded)
	if err != nil {
		return "", err
	}
	// The object is public: an anonymous GET of the URL in status, which is the one the webhook
	// injects into pods (http: the local S3 server speaks plain HTTP).
	resp, err := http.Get(df.Status.S3URL)
	if err != nil {
		return "", fmt.Errorf("anonymous GET %s: %w", df.Status.S3URL, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("anonymous GET %s: %s: %w", df.Status.S3URL, resp.Status, err)
	}
	if !strings.Contains(string(body), "Winter sale & more") {
		return "", fmt.Errorf("object at %s does not hold the current content", df.Status.S3URL)
	}
	fmt.Fprintf(out, "    target s3: status.s3URL %s; anonymous GET → 200, %d bytes\n", df.Status.S3URL, len(body))
	release, content, err := s.coldStart(ctx, env)
	if err != nil {
		return "", err
	}
	if release != df.Status.S3URL {
		return "", fmt.Errorf("a new pod got %s=%q, want the object's URL %s", decov1alpha1.EnvRelease, release, df.Status.S3URL)
	}
	if !strings.Contains(content, "Winter sale & more") {
		return "", fmt.Errorf("a pod cold-started from %s does not serve the current content", release)
	}
	coldPod := "a site runtime"
	if env.Node != nil {
		coldPod = "a real pod"
	}
	fmt.Fprintf(out, "    %s cold-started from %s=%s and serves the current content\n", coldPod, decov1alpha1.EnvRelease, release)

	if err := setTarget(decov1alpha1.TargetConfigMap); err != nil {
		return "", fmt.Errorf("switch back to the configmap target: %w", err)
	}
	if df, err = readyWith(decov1alpha1.ReasonSucceeded); err != nil {
		return "", err
	}
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: df.ConfigMapName()}, cm); err != nil {
		return "", err
	}
	if !strings.Contains(cm.Data[decov1alpha1.KeyJSON], "Winter sale & more") {
		return "", fmt.Errorf("ConfigMap %s does not hold the current content after switching back", cm.Name)
	}
	fmt.Fprintf(out, "    target configmap: ConfigMap %s holds the current content again\n", cm.Name)
	if env.Node != nil {
		return "configmap → s3 (public object; a real pod cold-started from it) → configmap", nil
	}
	return "configmap → s3 (public object; a site runtime cold-started from it) → configmap", nil
}
