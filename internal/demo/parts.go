package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/devenv"
)

// tenantACL annotates a site namespace and checks that its Valkey user exists on the master and
// the replica, reaches its own keys, and is refused commands that would touch other tenants.
func tenantACL(namespace string) func(context.Context, *devenv.Env, io.Writer) (string, error) {
	return func(ctx context.Context, env *devenv.Env, out io.Writer) (string, error) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Annotations: map[string]string{decov1alpha1.AnnotationValkeyACL: "true"}}}
		if err := env.Client.Create(ctx, ns); err != nil {
			return "", fmt.Errorf("create namespace: %w", err)
		}
		fmt.Fprintf(out, "    annotated namespace %s with %s=true\n", namespace, decov1alpha1.AnnotationValkeyACL)
		secret := &corev1.Secret{}
		if err := waitFor(ctx, time.Minute, func() error {
			return env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: decov1alpha1.ValkeyACLSecretName}, secret)
		}); err != nil {
			return "", fmt.Errorf("secret %s: %w", decov1alpha1.ValkeyACLSecretName, err)
		}
		user := string(secret.Data[decov1alpha1.ValkeyACLUsernameKey])
		pass := string(secret.Data[decov1alpha1.ValkeyACLPasswordKey])
		nodes := append([]string{env.Servers.Valkey.Master.Addr}, env.Servers.Valkey.Replicas[0].Addr)
		for i, addr := range nodes {
			c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pass})
			err := c.Ping(ctx).Err()
			if err == nil && i == 0 {
				err = c.Set(ctx, user+":greeting", "hello", time.Minute).Err()
			}
			var denied error
			if err == nil {
				if denied = c.FlushAll(ctx).Err(); denied == nil || !strings.Contains(denied.Error(), "NOPERM") {
					err = fmt.Errorf("FLUSHALL as tenant %s on %s was not refused: %w", user, addr, denied)
				}
			}
			c.Close()
			if err != nil {
				return "", fmt.Errorf("tenant %s on %s: %w", user, addr, err)
			}
			fmt.Fprintf(out, "    %s: AUTH %s ok, FLUSHALL refused (%s)\n", addr, user, firstWord(denied.Error()))
		}
		return fmt.Sprintf("user %q on master and replica, Secret %s/%s", user, namespace, decov1alpha1.ValkeyACLSecretName), nil
	}
}

// waves copies the sample homelab repository and runs the wave planner on it through the CLI.
func waves(examples string, run Runner) func(context.Context, *devenv.Env, io.Writer) (string, error) {
	return func(ctx context.Context, env *devenv.Env, out io.Writer) (string, error) {
		if _, err := os.Stat(filepath.Join(examples, "catalog")); err != nil {
			return "", fmt.Errorf("sample repository %s not found (run the demo from the siteops checkout): %w", examples, err)
		}
		repo := filepath.Join(env.StateDir, "homelab")
		_ = os.RemoveAll(repo)
		if err := os.CopyFS(repo, os.DirFS(examples)); err != nil {
			return "", err
		}
		if err := git(repo, "init", "--quiet", "--initial-branch=main"); err != nil {
			return "", err
		}
		if err := git(repo, "add", "-A"); err != nil {
			return "", err
		}
		if err := git(repo, "-c", "user.name=Demo", "-c", "user.email=demo@example.com", "commit", "--quiet", "-m", "pre-split layout"); err != nil {
			return "", err
		}
		for _, args := range [][]string{
			{"waves", "print", "--catalog", filepath.Join(repo, "catalog")},
			{"waves", "emit", "--repo", repo, "--move"},
			{"waves", "lint", "--repo", repo, "--compare-ref", "HEAD"},
		} {
			fmt.Fprintf(out, "    $ siteops %s\n", strings.Join(args, " "))
			if err := run(ctx, indent(out), args...); err != nil {
				return "", fmt.Errorf("siteops %s: %w", strings.Join(args[:2], " "), err)
			}
		}
		waves, _ := filepath.Glob(filepath.Join(repo, "apps", "wave-*"))
		if len(waves) == 0 {
			return "", errors.New("emit produced no apps/wave-N folders")
		}
		return fmt.Sprintf("%d waves emitted and lint-clean in %s", len(waves), repo), nil
	}
}

func firstWord(s string) string {
	if i := strings.IndexByte(s, ' '); i > 0 {
		return s[:i]
	}
	return s
}

// indentWriter prefixes every line it writes, so command output nests under its step.
type indentWriter struct {
	w       io.Writer
	midLine bool
}

func indent(w io.Writer) io.Writer { return &indentWriter{w: w} }

func (iw *indentWriter) Write(p []byte) (int, error) {
	var b strings.Builder
	for _, c := range string(p) {
		if !iw.midLine {
			b.WriteString("      ")
			iw.midLine = true
		}
		b.WriteRune(c)
		if c == '\n' {
			iw.midLine = false
		}
	}
	if _, err := io.WriteString(iw.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}
