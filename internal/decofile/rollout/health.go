package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/pkg/siteruntime"
)

// checkTimeout bounds one health or check request to one pod.
const checkTimeout = 10 * time.Second

// maxHealthBytes is the most of a health answer that is read (it carries a 64-character hash).
const maxHealthBytes = 1024

// checkPathPattern is the CRD's rule for spec.rollout.check.path, applied again before any
// request: a Decofile stored before the rule, or written around it, must not make the operator
// ask anything but a path on the pod.
var checkPathPattern = regexp.MustCompile(`^/[A-Za-z0-9._~!$&'()*+,;=:%/-]*$`)

// ValidCheckPath reports whether p may be asked of a pod: an absolute path of at most 256
// characters without '.' or '..' segments, not starting with "//", with no query, fragment,
// user info, host or scheme.
func ValidCheckPath(p string) error {
	if len(p) > 256 || !checkPathPattern.MatchString(p) || strings.HasPrefix(p, "//") {
		return fmt.Errorf("spec.rollout.check.path %q is not an absolute path on the pod", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("spec.rollout.check.path %q has a %q segment", p, seg)
		}
	}
	return nil
}

// podCheck is what one check after a step found wrong with one pod ("" when it is healthy).
type podCheck struct {
	name, problem string
}

// checkPods asks every pod named in names, after a step, whether it still serves content hash
// healthily: the pod (read again from the API server) is not NotReady, its health endpoint
// answers and reports that hash, and spec.rollout.check, when set, answers its expected status.
// Requests go only to the pod's own IP (from the API server, never from the Decofile) and reload
// port, without the reload token, and redirects are not followed. Pods that went away are not
// counted against the step.
func (r *Reconciler) checkPods(ctx context.Context, df *decov1alpha1.Decofile, names []string, hash string) []podCheck {
	problems := make([]podCheck, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.notifier.Config().Concurrency)
	for i, name := range names {
		g.Go(func() error {
			problems[i] = podCheck{name: name, problem: r.checkPod(gctx, df, name, hash)}
			return nil
		})
	}
	_ = g.Wait()
	var out []podCheck
	for _, p := range problems {
		if p.problem != "" {
			out = append(out, p)
		}
	}
	return out
}

func (r *Reconciler) checkPod(ctx context.Context, df *decov1alpha1.Decofile, name, hash string) string {
	var p corev1.Pod
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: df.Namespace, Name: name}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return ""
		}
		return fmt.Sprintf("re-read pod: %v", err)
	}
	t := Target(&p)
	if t.SkipReason != "" {
		if p.DeletionTimestamp != nil {
			return ""
		}
		return "after the step: " + t.SkipReason
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse {
			return "not Ready after the step" + reasonSuffix(c.Reason)
		}
	}
	host := net.JoinHostPort(t.IP, strconv.Itoa(int(t.Port)))
	code, body, err := r.get(ctx, host, siteruntime.HealthPath)
	switch {
	case err != nil:
		return "health: " + err.Error()
	case code == http.StatusNotFound || code == http.StatusMethodNotAllowed:
		// A runtime without a health endpoint (the published Deno runtime): its reload answer
		// and Readiness are all it reports.
	case code != http.StatusOK:
		return fmt.Sprintf("health: HTTP %d%s", code, notify.Excerpt(body))
	default:
		var h siteruntime.Health
		if json.Unmarshal(body, &h) == nil && h.ContentHash != "" && h.ContentHash != hash {
			return fmt.Sprintf("health: serves content %s, not %s", shortHash(h.ContentHash), shortHash(hash))
		}
	}
	if c := df.Spec.Rollout.Check; c != nil {
		if err := ValidCheckPath(c.Path); err != nil {
			return err.Error()
		}
		want := int(c.ExpectedStatus)
		if want == 0 {
			want = http.StatusOK
		}
		code, body, err := r.get(ctx, host, c.Path)
		switch {
		case err != nil:
			return fmt.Sprintf("check %s: %v", c.Path, err)
		case code != want:
			return fmt.Sprintf("check %s: HTTP %d, want %d%s", c.Path, code, want, notify.Excerpt(body))
		}
	}
	return ""
}

// get asks path of host (a pod IP and port) and returns the status and the start of the body.
// The URL is built from its parts, so nothing in path can change the host.
func (r *Reconciler) get(ctx context.Context, host, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	u := url.URL{Scheme: "http", Host: host, Path: path}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, nil, fmt.Errorf("build request: %w", err)
	}
	req.URL = &u // exactly these parts, whatever String made of them
	resp, err := r.checkClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, fmt.Errorf("no answer within %s", checkTimeout)
		}
		return 0, nil, fmt.Errorf("request failed%s", notify.Excerpt([]byte(unwrapURLError(err).Error())))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxHealthBytes))
	return resp.StatusCode, body, nil
}

// unwrapURLError drops the "Get \"http://…\":" prefix: the pod is named by the caller.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
