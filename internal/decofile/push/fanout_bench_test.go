package push_test

import (
	"errors"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/testenv"
)

// BenchmarkPushFanOut measures, at the delivery controller's default concurrency, the time from
// a push event for one repository to all 200 Decofiles following it Ready at the pushed commit,
// while a slow remote (every request answered after slowDelay) has Decofiles in flight: each
// iteration pushes to the slow repository first, so its 20 Decofiles are being reconciled when
// the healthy push arrives. It reports the healthy repository's fetches per commit (POST
// git-upload-pack) and resolves per commit (ref listings that were not part of a fetch).
func BenchmarkPushFanOut(b *testing.B) {
	b.Run("alone", func(b *testing.B) { benchFanOut(b, 0) })
	b.Run("beside-slow-remote", func(b *testing.B) { benchFanOut(b, 3*time.Second) })
}

func benchFanOut(b *testing.B, slowDelay time.Duration) {
	const (
		namespaces, perNamespace = 4, 50 // 200 Decofiles, the default per-namespace push bound each
		slowN                    = 20
	)
	e := startFanout(b)
	slow, healthy := newProxiedRemote(b, "slow"), newProxiedRemote(b, "healthy")
	slow.commit(b, 0)
	sha := healthy.commit(b, 0)
	var nss []string
	for range namespaces {
		ns := e.c.Namespace(b, "fanoutbench", nil)
		nss = append(nss, ns)
		e.follow(b, e.c.Client, ns, "healthy", healthy, perNamespace)
	}
	slowNS := e.c.Namespace(b, "fanoutslow", nil)
	e.follow(b, e.c.Client, slowNS, "slow", slow, slowN)
	for _, ns := range nss {
		e.waitAtCommit(b, ns, "healthy", sha, perNamespace, nil)
	}
	e.waitAtCommit(b, slowNS, "slow", slow.head(b), slowN, nil)
	slow.delay.Store(int64(slowDelay))
	defer slow.delay.Store(0)

	fetches, lists := healthy.fetches.Load(), healthy.lists.Load()
	var held int64
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		b.StopTimer()
		slowSHA := slow.commit(b, i)
		sha = healthy.commit(b, i)
		if slowDelay > 0 {
			e.sendPush(b, slow, slowSHA)
			// The slow remote's Decofiles are in flight before the healthy push arrives.
			testenv.Eventually(b, fanoutWait, func() error {
				if slow.waiting.Load() == 0 {
					return errors.New("no request of the slow remote in flight yet")
				}
				return nil
			})
		}
		b.StartTimer()
		e.sendPush(b, healthy, sha)
		for _, ns := range nss {
			e.waitAtCommit(b, ns, "healthy", sha, perNamespace, nil)
		}
		b.StopTimer()
		held += slow.waiting.Load()
		b.StartTimer()
	}
	b.StopTimer()
	f, l := healthy.fetches.Load()-fetches, healthy.lists.Load()-lists
	b.ReportMetric(float64(f)/float64(b.N), "fetches/commit")
	b.ReportMetric(float64(l-f)/float64(b.N), "resolves/commit")
	b.ReportMetric(float64(held)/float64(b.N), "slow-requests-in-flight")
	b.Logf("%d Decofiles per push; slow remote answers after %s", namespaces*perNamespace, slowDelay)
}
