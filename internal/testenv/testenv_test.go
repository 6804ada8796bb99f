package testenv_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

func TestAPIServerServesCRDs(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "decofiles.deco.sites"}, crd); err != nil {
		t.Fatalf("Decofile CRD not installed: %v", err)
	}
	ns := c.Namespace(t, "testenv", nil)
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1alpha1.DecofileSpec{
			Source: decov1alpha1.SourceInline,
			Inline: &decov1alpha1.InlineSource{Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{"title":"Home"}`)}}},
		},
	}
	if err := c.Client.Create(ctx, df); err != nil {
		t.Fatalf("create Decofile: %v", err)
	}
	got := &decov1alpha1.Decofile{}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(df), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Target != decov1alpha1.TargetConfigMap {
		t.Errorf("spec.target default = %q, want configmap", got.Spec.Target)
	}
	if string(got.Spec.Inline.Value["home"].Raw) != `{"title":"Home"}` {
		t.Errorf("inline value = %s", got.Spec.Inline.Value["home"].Raw)
	}

	bad := df.DeepCopy()
	bad.ObjectMeta = metav1.ObjectMeta{Name: "bad", Namespace: ns}
	bad.Spec.Source = decov1alpha1.SourceGitHub
	if err := c.Client.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "exactly the block named by spec.source") {
		t.Errorf("Decofile whose source block is missing: err = %v, want the CEL validation message", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}, Data: map[string]string{"k": "v"}}
	if err := c.Client.Create(ctx, cm); err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}
}

func TestRedis(t *testing.T) {
	p := testenv.Redis(t, servers.RedisOptions{})
	c := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "greeting", "hello", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "greeting").Result(); err != nil || v != "hello" {
		t.Fatalf("GET greeting = %q, %v", v, err)
	}
}

func TestSentinelSet(t *testing.T) {
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Sentinels: 3})
	ctx := context.Background()
	for _, addr := range set.SentinelAddrs() {
		s := redis.NewSentinelClient(&redis.Options{Addr: addr})
		got, err := s.GetMasterAddrByName(ctx, set.MasterName).Result()
		s.Close()
		if err != nil {
			t.Fatalf("sentinel %s: %v", addr, err)
		}
		if got[0]+":"+got[1] != set.Master.Addr {
			t.Errorf("sentinel %s says master is %v, want %s", addr, got, set.Master.Addr)
		}
	}
	// A write to the master reaches the replica, through a client that found the master by Sentinel.
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: set.MasterName, SentinelAddrs: set.SentinelAddrs()})
	defer fc.Close()
	if err := fc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: set.Replicas[0].Addr})
	defer rc.Close()
	testenv.Eventually(t, 5e9, func() error { return rc.Get(ctx, "k").Err() })
}

func TestGitRemoteCloneAndPush(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{Username: "git", Password: "secret"})
	url, err := remote.CreateRepo("site", "main")
	if err != nil {
		t.Fatal(err)
	}
	authURL := strings.Replace(url, "http://", "http://git:secret@", 1)
	work := filepath.Join(t.TempDir(), "work")
	git(t, "", "clone", "--quiet", authURL, work)
	if err := os.WriteFile(filepath.Join(work, "hello.txt"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, work, "add", ".")
	git(t, work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "--quiet", "-m", "first")
	git(t, work, "push", "--quiet", "origin", "main")

	second := filepath.Join(t.TempDir(), "second")
	git(t, "", "clone", "--quiet", authURL, second)
	if b, err := os.ReadFile(filepath.Join(second, "hello.txt")); err != nil || string(b) != "hi\n" {
		t.Fatalf("pushed file in a fresh clone = %q, %v", b, err)
	}
	cmd := exec.Command("git", "ls-remote", url)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("ls-remote without credentials succeeded: %s", out)
	}
}

func TestS3PutGet(t *testing.T) {
	s := testenv.S3(t, true, "decofiles")
	ctx := context.Background()
	c := s.Client(nil)
	body := []byte(`{"home":{}}`)
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("decofiles"), Key: aws.String("ns/site/decofile.json"), Body: bytes.NewReader(body), ContentType: aws.String("application/json")}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("decofiles"), Key: aws.String("ns/site/decofile.json")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if !bytes.Equal(got, body) {
		t.Fatalf("GetObject = %q, want %q", got, body)
	}
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}
