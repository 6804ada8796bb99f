package cli

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/testenv"
)

// benchSites is how many Decofiles the get and stats benchmarks read.
const benchSites = 5000

// sites records whether the benchmarks' Decofiles were made: once, on the package's shared API
// server, for every benchmark (and every run of one) to read.
var sites struct {
	once    sync.Once
	created bool
}

// manySites creates n git Decofiles over 50 namespaces once, each with the status a delivered
// site has, and returns a kubeconfig for them that lives as long as b.
func manySites(b *testing.B, n int) string {
	b.Helper()
	sites.once.Do(func() { sites.created = createSites(b, n) })
	if !sites.created {
		b.Fatal("the sites were not created")
	}
	return kubeconfigFor(b, testenv.APIServer(b).Config, "default")
}

func createSites(b *testing.B, n int) bool {
	b.Helper()
	c := testenv.APIServer(b)
	ctx := context.Background()
	// The namespaces outlive this benchmark: the later ones read the same sites.
	var nss []string
	for range 50 {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
		if err := c.Client.Create(ctx, ns); err != nil {
			b.Fatal(err)
		}
		nss = append(nss, ns.Name)
	}
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				d := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: nss[i%len(nss)], Name: fmt.Sprintf("site-%05d", i)},
					Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Git: &decov1.GitSource{URL: "https://git.invalid/sites.git", Ref: "main", Path: fmt.Sprintf("sites/%d", i)}}}
				if err := c.Client.Create(ctx, d); err != nil {
					errs <- err
					return
				}
				d.Status = decov1.DecofileStatus{ObservedGeneration: d.Generation, SourceType: decov1.SourceGit,
					GitHubCommit: strings.Repeat("ab", 20), ShortCommit: "abababa", ContentHash: strings.Repeat("cd", 32), NotifiedHash: strings.Repeat("cd", 32),
					ConfigMapName: "decofile-" + d.Name, Format: decov1.FormatBin, StoredBytes: 40 << 10, LastUpdated: &metav1.Time{Time: time.Now()},
					Rollout: &decov1.RolloutStatus{ID: "commit:" + strings.Repeat("ab", 20), Total: 3, Notified: 3}}
				meta.SetStatusCondition(&d.Status.Conditions, metav1.Condition{Type: decov1.ConditionReady, Status: metav1.ConditionTrue, Reason: decov1.ReasonSucceeded, Message: "stored"})
				meta.SetStatusCondition(&d.Status.Conditions, metav1.Condition{Type: decov1.ConditionPodsNotified, Status: metav1.ConditionTrue, Reason: decov1.ReasonNotificationSucceeded, Message: "Successfully notified all pods"})
				if err := c.Client.Status().Update(ctx, d); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range n {
		select {
		case work <- i:
		case err := <-errs:
			b.Fatal(err)
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	return true
}

// BenchmarkGetAllNamespaces5000: `siteops get decofiles -A` over 5 000 delivered sites, each
// iteration a whole run of the command (kubeconfig, client, paged lists, sort, table).
func BenchmarkGetAllNamespaces5000(b *testing.B) {
	kc := manySites(b, benchSites)
	b.ResetTimer()
	for range b.N {
		out, _, err := runCLI(context.Background(), "get", "decofiles", "-A", "--kubeconfig", kc)
		if err != nil || strings.Count(out, "\n") != benchSites+1 {
			b.Fatalf("get -A: %v, %d lines", err, strings.Count(out, "\n"))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/get")
}

// BenchmarkStats5000: `siteops stats -A` over the same 5 000 sites.
func BenchmarkStats5000(b *testing.B) {
	kc := manySites(b, benchSites)
	b.ResetTimer()
	for range b.N {
		out, _, err := runCLI(context.Background(), "stats", "-A", "-o", "json", "--kubeconfig", kc)
		if err != nil || !strings.Contains(out, fmt.Sprintf(`"total": %d`, benchSites)) {
			b.Fatalf("stats -A: %v\n%s", err, out)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/stats")
}
