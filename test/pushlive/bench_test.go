package pushlive

import (
	"slices"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/decofile/encode/sample"
	"github.com/siteops/siteops/internal/testenv/simpods"
)

// BenchmarkPushToAllPods is the time from a push event reaching the manager to all 1000 pods
// confirming the new content (PodsNotified=True for that commit), for the standard 4.2 MB site
// whose pods answer 100 ms after a push arrived, at the manager's default settings, over 20
// pushes: p50 and p99 (goal p99 ≤ 3 s). The event is sent by the git remote during `git push`;
// push-p50-s is the whole `git push`, and stored-p50-s the time from the event until the commit
// was stored (status.githubCommit). Pods that accept compression ("accepting", as the reference
// runtime) and pods that take plain JSON ("plain", as the published Deno runtime) are measured
// apart.
func BenchmarkPushToAllPods(b *testing.B) {
	const pods, pushes = 1000, 20
	files := sample.Generate(sample.Standard)
	for _, tc := range []struct{ name, accept string }{{"accepting", "br, gzip"}, {"plain", ""}} {
		b.Run(tc.name, func(b *testing.B) {
			s := startSite(b, files, simpods.Start(b, pods, tc.accept))
			// The pods' answers to the first content told the notifier what they accept.
			var all, pushOnly, stored []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k := range pushes {
					start := time.Now()
					commit := s.edit(b, i*pushes+k)
					pushOnly = append(pushOnly, time.Since(start))
					received := s.events.last()
					if received.Before(start) {
						b.Fatal("no push event reached the manager during the push")
					}
					storedAfter, confirmedAfter := s.waitConfirmed(b, commit, received, 2*time.Minute)
					stored = append(stored, storedAfter)
					all = append(all, confirmedAfter)
				}
			}
			b.StopTimer()
			b.ReportMetric(percentile(all, 50).Seconds(), "p50-s")
			b.ReportMetric(percentile(all, 99).Seconds(), "p99-s")
			b.ReportMetric(percentile(pushOnly, 50).Seconds(), "push-p50-s")
			b.ReportMetric(percentile(stored, 50).Seconds(), "stored-p50-s")
		})
	}
}

// percentile is the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[(len(s)*p+99)/100-1]
}
