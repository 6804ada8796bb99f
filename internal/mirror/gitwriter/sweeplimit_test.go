package gitwriter

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// bombRemote is a real git remote on loopback whose main holds ns/core/configmaps/a.yaml and,
// under ns/core/configmaps/bomb, a tree bomb of 8 folders pointing at the folder below, 7
// levels: 2 097 152 files named *.yaml from a few KB of objects.
func bombRemote(t *testing.T) (url, bare string) {
	t.Helper()
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo("bomb", "main")
	if err != nil {
		t.Fatal(err)
	}
	bare = remote.RepoDir("bomb")
	testenv.PushTreeBomb(t, bare, "main", testenv.TreeBomb{
		Folder: "ns/core/configmaps/bomb", Fanout: 8, Depth: 6, Leaf: ".yaml", Content: "x: 1\n",
		Files: map[string]string{"ns/core/configmaps/a.yaml": "a: 1\n"},
	})
	return url, bare
}

// totalAlloc is the total of heap allocations so far (it only grows: a difference bounds what
// was allocated in between, garbage included).
func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// TestSweepOfTreeBombRefused: a target's folder holding a tree bomb is not swept: the sweep
// stops at the entry bound, removes nothing, and its target (only) is reported TargetTooLarge
// naming the flag, while another target's change in the same batch is committed; the writer
// allocates a bounded amount doing so.
func TestSweepOfTreeBombRefused(t *testing.T) {
	url, bare := bombRemote(t)
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 100 * time.Millisecond})
	ctx := context.Background()
	first := upsert("other/core/configmaps/x.yaml", "x\n", "1")
	first.Target = "neighbour"
	must(t, w.Enqueue(ctx, first))
	waitCommits(t, bare, 2)

	runtime.GC()
	before := totalAlloc()
	sweep := Op{Kind: OpSweep, Target: "bombed", SweepDir: "ns/core/configmaps", Keep: map[string]struct{}{}, SweepRefPrefix: "v1/configmaps/ns/"}
	must(t, w.Enqueue(ctx, sweep))
	next := upsert("other/core/configmaps/y.yaml", "y\n", "2")
	next.Target = "neighbour"
	must(t, w.Enqueue(ctx, next))
	waitCommits(t, bare, 3)
	grew := totalAlloc() - before

	st := w.Status()
	t.Logf("refused: %v; %d MiB allocated", st.TooLarge["bombed"], grew>>20)
	if err := st.TooLarge["bombed"]; !errors.Is(err, ErrTargetTooLarge) || !strings.Contains(err.Error(), FlagMaxSweepEntries) {
		t.Fatalf("the bombed target's refusal = %v; want ErrTargetTooLarge naming %s", err, FlagMaxSweepEntries)
	}
	if err := st.TooLarge["neighbour"]; err != nil || st.LastError != nil {
		t.Fatalf("the neighbour target got %v, the writer %v", err, st.LastError)
	}
	files := gitOut(t, "", "--git-dir", bare, "ls-tree", "--name-only", "main", "ns/core/configmaps/", "other/core/configmaps/")
	if files != "ns/core/configmaps/a.yaml\nns/core/configmaps/bomb\nother/core/configmaps/x.yaml\nother/core/configmaps/y.yaml" {
		t.Fatalf("after the refused sweep the branch holds:\n%s", files)
	}
	const bound = 64 << 20
	if grew > bound {
		t.Fatalf("allocated %d MiB while refusing the sweep; want at most %d MiB", grew>>20, bound>>20)
	}
}

// TestSweepRemovalsBounded: a sweep that would remove more files than the bound is refused
// naming the flag; once the folder holds fewer to remove, the sweep runs and the refusal is
// gone.
func TestSweepRemovalsBounded(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("many", "main")
	bare := remote.RepoDir("many")
	files := map[string]string{}
	keep := map[string]struct{}{}
	for i := range 30 {
		p := fmt.Sprintf("ns/core/configmaps/c%02d.yaml", i)
		files[p] = "v: 1\n"
		if i >= 5 {
			keep[p] = struct{}{}
		}
	}
	testenv.PushTreeBomb(t, bare, "main", testenv.TreeBomb{Folder: "unrelated", Fanout: 1, Leaf: ".txt", Files: files})
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, MaxSweepChanges: 10})
	ctx := context.Background()
	sweep := Op{Kind: OpSweep, Target: "t", SweepDir: "ns/core/configmaps", Keep: map[string]struct{}{}, SweepRefPrefix: "v1/configmaps/ns/"}
	must(t, w.Enqueue(ctx, sweep))
	testenv.Eventually(t, 15*time.Second, func() error {
		if err := w.Status().TooLarge["t"]; err == nil {
			return errors.New("no refusal yet")
		}
		return nil
	})
	if err := w.Status().TooLarge["t"]; !errors.Is(err, ErrTargetTooLarge) || !strings.Contains(err.Error(), "remove 30 files") || !strings.Contains(err.Error(), FlagMaxSweepChanges) {
		t.Fatalf("refusal = %v; want one naming 30 files and %s", err, FlagMaxSweepChanges)
	}
	sweep.Keep = keep
	must(t, w.Enqueue(ctx, sweep))
	waitCommits(t, bare, 2)
	testenv.Eventually(t, 15*time.Second, func() error {
		if err := w.Status().TooLarge["t"]; err != nil {
			return fmt.Errorf("still refused after a sweep ran: %w", err)
		}
		return nil
	})
	if n := len(strings.Fields(gitOut(t, "", "--git-dir", bare, "ls-tree", "--name-only", "main", "ns/core/configmaps/"))); n != 25 {
		t.Fatalf("after the sweep %d files are left, want 25", n)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
