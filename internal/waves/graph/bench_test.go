package graph

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// RandomDAG returns n services, each depending on up to four earlier ones, a tenth of them on a
// `-db` leaf.
func RandomDAG(n int, seed uint64) Input {
	r := rand.New(rand.NewPCG(seed, seed))
	in := Input{Services: make([]Service, n)}
	for i := range in.Services {
		s := &in.Services[i]
		s.Name = fmt.Sprintf("svc-%05d", i)
		for k := r.IntN(5); k > 0 && i > 0; k-- {
			s.DependsOn = append(s.DependsOn, fmt.Sprintf("svc-%05d", r.IntN(i)))
		}
		s.DependsOn = dedupe(s.DependsOn)
		if i%10 == 0 {
			s.DependsOn = append(s.DependsOn, s.Name+"-db")
		}
	}
	return in
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func BenchmarkCompute10k(b *testing.B) {
	in := RandomDAG(10000, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compute(in); err != nil {
			b.Fatal(err)
		}
	}
}
