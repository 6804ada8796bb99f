package pushlive

import (
	"slices"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/decofile/encode/sample"
	"github.com/siteops/siteops/internal/testenv/simpods"
)

// BenchmarkPushToAllPods is the time from a git push to all 1000 pods confirming the new content
// (PodsNotified=True for that commit), for the standard 4.2 MB site whose pods answer 100 ms
// after a push arrived, at the manager's default settings, over 20 pushes: p50 and p99 (goal
// p99 ≤ 3 s). The time starts before `git push`, whose answer waits for the remote's push event
// to be accepted, so it holds the push itself too; push-s is that part alone. Pods that accept
// compression ("accepting", as the reference runtime) and pods that take plain JSON ("plain",
// as the published Deno runtime) are measured apart.
func BenchmarkPushToAllPods(b *testing.B) {
	const pods, pushes = 1000, 20
	files := sample.Generate(sample.Standard)
	for _, tc := range []struct{ name, accept string }{{"accepting", "br, gzip"}, {"plain", ""}} {
		b.Run(tc.name, func(b *testing.B) {
			s := startSite(b, files, simpods.Start(b, pods, tc.accept))
			// The pods' answers to the first content told the notifier what they accept.
			var all, pushOnly []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k := range pushes {
					start := time.Now()
					commit := s.edit(b, i*pushes+k)
					pushOnly = append(pushOnly, time.Since(start))
					s.waitConfirmed(b, commit, 2*time.Minute)
					all = append(all, time.Since(start))
				}
			}
			b.StopTimer()
			slices.Sort(all)
			slices.Sort(pushOnly)
			b.ReportMetric(all[len(all)/2].Seconds(), "p50-s")
			b.ReportMetric(all[(len(all)*99+99)/100-1].Seconds(), "p99-s")
			b.ReportMetric(pushOnly[len(pushOnly)/2].Seconds(), "push-s")
		})
	}
}
