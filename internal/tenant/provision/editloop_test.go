package provision_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/testenv"
)

// editRate is how often the tenant of the edit-loop tests writes its Secret: 50 times a second.
const editRate = 50

// editLoopDuration is how long the label loop runs: 15 s by default (long enough to show the
// work stays flat while a full minute's worth of edits would only multiply an unbounded cost),
// SITEOPS_EDIT_LOOP (a Go duration, e.g. 1m) for the full run.
func editLoopDuration(t *testing.T) time.Duration {
	if v := os.Getenv("SITEOPS_EDIT_LOOP"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SITEOPS_EDIT_LOOP=%q: %v", v, err)
		}
		return d
	}
	return 15 * time.Second
}

// editLoop has the tenant merge-patch its own valkey-acl Secret editRate times a second for d,
// from a few connections so a slow answer does not lower the rate; stop waits for the end and
// returns the edits made and refused. A merge patch carries no
// resourceVersion, so the tenant never loses a conflict to the operator.
func editLoop(t *testing.T, tn *testenv.Tenant, d time.Duration, body func(i int) string) (stop func() (edits, failed int64)) {
	t.Helper()
	var ok, bad atomic.Int64
	ticks := make(chan int, editRate)
	done := make(chan struct{})
	var wg sync.WaitGroup
	secret := &corev1.Secret{}
	secret.Namespace, secret.Name = tn.Namespace, decov1.ValkeyACLSecretName
	for range 4 {
		wg.Go(func() {
			for i := range ticks {
				patch := client.RawPatch(types.MergePatchType, []byte(body(i)))
				if err := tn.Client.Patch(context.Background(), secret.DeepCopy(), patch); err != nil {
					bad.Add(1)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Go(func() {
		defer close(ticks)
		tick := time.NewTicker(time.Second / editRate)
		defer tick.Stop()
		end := time.After(d)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-end:
				return
			case <-tick.C:
				select {
				case ticks <- i:
				default: // every connection is busy: this edit is skipped, the rate is reported
				}
			}
		}
	})
	stop = func() (int64, int64) {
		wg.Wait() // the loop ends after d
		return ok.Load(), bad.Load()
	}
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			close(done)
		}
		wg.Wait()
	})
	return stop
}

// aclCalls reads, per node, the calls of ACL SETUSER and ACL DRYRUN (the isolation probes) from
// INFO commandstats.
func (e *env) aclCalls(t *testing.T) map[string]map[string]int64 {
	t.Helper()
	out := map[string]map[string]int64{}
	for _, n := range e.nodes {
		c := e.admin(n)
		info, err := c.Info(context.Background(), "commandstats").Result()
		c.Close()
		if err != nil {
			t.Fatalf("INFO commandstats on %s: %v", n, err)
		}
		out[n] = map[string]int64{}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || (name != "cmdstat_acl|setuser" && name != "cmdstat_acl|dryrun") {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			v, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				t.Fatalf("commandstats line %q: %v", line, err)
			}
			out[n][strings.TrimPrefix(name, "cmdstat_acl|")] = v
		}
	}
	return out
}

// reconciles is how many reconciles the tenant namespace controller has run in this process.
func reconciles() float64 {
	var sum float64
	for _, result := range []string{"success", "error", "requeue", "requeue_after"} {
		v, _ := metricValue("controller_runtime_reconcile_total", map[string]string{"controller": "tenant-namespace", "result": result})
		sum += v
	}
	return sum
}

// provisionedWithin opts ns in and returns how long it took until the Secret's credentials
// authenticate on every node.
func (e *env) provisionedWithin(t *testing.T, ns string) time.Duration {
	t.Helper()
	start := time.Now()
	e.annotate(t, ns, map[string]*string{decov1.AnnotationValkeyACL: on()})
	testenv.Eventually(t, 30*time.Second, func() error {
		s, err := e.secret(ns)
		if err != nil {
			return err
		}
		return e.authEverywhere(context.Background(), string(s.Data[decov1.ValkeyACLUsernameKey]), string(s.Data[decov1.ValkeyACLPasswordKey]))
	})
	return time.Since(start)
}

// TestSecuritySecretLabelLoopCostsNoNodeWork: a tenant (bound to edit in its own namespace)
// rewrites a label of its valkey-acl Secret 50 times a second. Nothing the operator decides
// with changes, so the loop costs the Valkey nodes no ACL SETUSER and no isolation probe, its
// namespace is reconciled about once a second, and namespaces the platform opts in meanwhile
// are provisioned on every node within 2 s.
func TestSecuritySecretLabelLoopCostsNoNodeWork(t *testing.T) {
	e := newEnv(t) // resync period 1h: every ACL command counted below comes from the namespace controller
	ctx := context.Background()
	tn := e.c.Tenant(t, "sites-label-loop", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, pass := e.waitSecret(t, tn.Namespace, "")
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, pass) })
	bystanders := make([]string, 3)
	for i := range bystanders {
		bystanders[i] = e.namespace(t, fmt.Sprintf("sites-bystander%d", i), nil)
	}
	time.Sleep(2 * provision.SecretEventInterval) // the provisioning's own Secret events are handled

	d := editLoopDuration(t)
	rec, calls := reconciles(), e.aclCalls(t)
	start := time.Now()
	stop := editLoop(t, tn, d, func(i int) string {
		return fmt.Sprintf(`{"metadata":{"labels":{"loop":"edit-%d"}}}`, i)
	})
	for i, ns := range bystanders {
		time.Sleep(time.Until(start.Add(d * time.Duration(i+1) / time.Duration(len(bystanders)+1))))
		took := e.provisionedWithin(t, ns)
		t.Logf("%s provisioned on every node %v after it was annotated, %v into the edit loop", ns, took.Round(time.Millisecond), time.Since(start).Round(time.Second))
		if took > 2*time.Second {
			t.Errorf("%s was provisioned on every node only %v after it was annotated, while a tenant edited its Secret; want at most 2s", ns, took)
		}
	}
	edits, failed := stop()
	loop := time.Since(start)
	time.Sleep(2 * provision.SecretEventInterval) // the last deferred reconcile runs
	after, ran := e.aclCalls(t), reconciles()-rec
	t.Logf("%d label edits in %v (%.0f/s, %d refused); %v reconciles", edits, loop.Round(time.Second), float64(edits)/loop.Seconds(), failed, ran)
	if rate := float64(edits) / loop.Seconds(); rate < editRate/2 {
		t.Fatalf("the tenant managed only %.0f edits a second; the test needs about %d", rate, editRate)
	}
	// The bystanders' first provision: one SETUSER and one proof (9 probes) per node each.
	for _, n := range e.nodes {
		setusers, probes := after[n]["setuser"]-calls[n]["setuser"], after[n]["dryrun"]-calls[n]["dryrun"]
		t.Logf("node %s: %d ACL SETUSER, %d ACL DRYRUN during the loop", n, setusers, probes)
		if limit := int64(len(bystanders) + 2); setusers > limit {
			t.Errorf("node %s ran %d ACL SETUSER during %d label edits of one Secret; want at most %d (the bystanders' first provision)", n, setusers, edits, limit)
		}
		if limit := int64(9 * (len(bystanders) + 2)); probes > limit {
			t.Errorf("node %s ran %d isolation probes during %d label edits of one Secret; want at most %d", n, probes, edits, limit)
		}
	}
	if limit := loop.Seconds()/provision.SecretEventInterval.Seconds() + float64(6*len(bystanders)) + 10; ran > limit {
		t.Errorf("%v reconciles during %d label edits; want at most %.0f (one a second for the loop, a few per bystander)", ran, edits, limit)
	}
	if err := e.authEverywhere(ctx, user, pass); err != nil {
		t.Fatalf("the looping tenant's own credentials changed: %v", err)
	}
}

// TestSecuritySecretPasswordLoopIsRateLimited: a tenant overwrites the password in its Secret
// 50 times a second. Each overwrite is undone with a new password (the edited one is never
// applied), but at most once per provision.ApplyInterval (a second), however the edits conflict
// with the restores: the nodes apply the tenant's user once a second, not once per edit.
func TestSecuritySecretPasswordLoopIsRateLimited(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tn := e.c.Tenant(t, "sites-password-loop", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, pass := e.waitSecret(t, tn.Namespace, "")
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, pass) })
	time.Sleep(2 * provision.SecretEventInterval)

	const d = 5 * time.Second
	calls, rec := e.aclCalls(t), reconciles()
	start := time.Now()
	stop := editLoop(t, tn, d, func(i int) string {
		forged := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "forged-%d", i))
		return fmt.Sprintf(`{"data":{%q:%q}}`, decov1.ValkeyACLPasswordKey, forged)
	})
	edits, _ := stop()
	loop := time.Since(start)
	var final string
	testenv.Eventually(t, 20*time.Second, func() error {
		s, err := e.secret(tn.Namespace)
		if err != nil {
			return err
		}
		final = string(s.Data[decov1.ValkeyACLPasswordKey])
		if strings.HasPrefix(final, "forged-") {
			return fmt.Errorf("the Secret still holds the tenant's password")
		}
		return e.authEverywhere(ctx, user, final)
	})
	after, window := e.aclCalls(t), time.Since(start)
	t.Logf("%d password edits in %v; %v reconciles and the Secret restored %v after the loop began", edits, loop.Round(time.Second), reconciles()-rec, window.Round(100*time.Millisecond))
	for _, n := range e.nodes {
		setusers := after[n]["setuser"] - calls[n]["setuser"]
		t.Logf("node %s: %d ACL SETUSER", n, setusers)
		if limit := int64(window/provision.ApplyInterval) + 2; setusers > limit {
			t.Errorf("node %s ran %d ACL SETUSER during %d password edits in %v; want at most %d (one a second)", n, setusers, edits, window.Round(time.Second), limit)
		}
	}
	for i := range 3 {
		if err := auth(ctx, e.nodes[0], user, fmt.Sprintf("forged-%d", i)); err == nil {
			t.Fatal("a password the tenant wrote into its Secret was applied")
		}
	}
}
