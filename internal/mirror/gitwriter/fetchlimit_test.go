package gitwriter

import (
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// hostileRepo is a real git remote on loopback whose branch main holds, besides a small file,
// the files the shell command script writes in a clone (sh -c, in the clone's work tree).
func hostileRepo(t *testing.T, name, script string) (url, bare string) {
	t.Helper()
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo(name, "main")
	if err != nil {
		t.Fatal(err)
	}
	clone := t.TempDir()
	gitOut(t, "", "clone", "-q", url, clone)
	cmd := exec.Command("sh", "-c", "echo hello > README.md && "+script)
	cmd.Dir = clone
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("write the files: %v: %s", err, out)
	}
	gitOut(t, clone, "add", "-A")
	gitOut(t, clone, "commit", "-q", "-m", "content")
	// Straight into the bare repository: the test server takes no chunked uploads.
	bare = remote.RepoDir(name)
	gitOut(t, clone, "push", "-q", bare, "HEAD:main")
	return url, bare
}

// fetchError starts a writer on url with cfg's bounds, hands it one change and returns the
// writer's first failure; a push (the fetch went through) fails the test.
func fetchError(t *testing.T, url string, cfg Config) error {
	t.Helper()
	cfg.URL, cfg.Branch, cfg.Committer = url, "main", Signature{"Mirror", "mirror@example.com"}
	cfg.RetryInterval = time.Hour
	w, _ := startWriter(t, cfg)
	if err := w.Enqueue(context.Background(), upsert("ns/core/configmaps/a.yaml", "a\n", "1")); err != nil {
		t.Fatal(err)
	}
	var st Status
	testenv.Eventually(t, time.Minute, func() error {
		if st = w.Status(); st.LastError == nil && st.LastPushedCommit == "" {
			return errors.New("no push and no error yet")
		}
		return nil
	})
	if st.LastError == nil {
		t.Errorf("the writer fetched the repository and pushed %s without an error", st.LastPushedCommit)
	}
	return st.LastError
}

// allocated is the total of heap allocations so far: it only grows, so a difference bounds
// what was allocated in between, even memory already collected.
func allocated() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// TestFetchStopsPastByteLimit: a remote whose branch holds 8 MiB of random data (a pack that
// cannot compress) is cut off once it sent more than the writer's bound of 1 MiB, and the
// error names the flag to raise, never the remote's words.
func TestFetchStopsPastByteLimit(t *testing.T) {
	url, _ := hostileRepo(t, "bigpack", "head -c 8388608 /dev/urandom > big.bin")
	err := fetchError(t, url, Config{MaxFetchBytes: 1 << 20})
	var re *RemoteError
	if !errors.As(err, &re) || !errors.Is(err, ErrFetchTooLarge) || !strings.Contains(err.Error(), FlagMaxFetchBytes) {
		t.Fatalf("fetch of an 8 MiB pack with a 1 MiB bound: %v; want a RemoteError of kind ErrFetchTooLarge naming %s", err, FlagMaxFetchBytes)
	}
	t.Log(err)
}

// TestFetchRefusesZlibBomb: a remote whose branch holds 64 MiB of zeros (a blob that compresses
// to 64 KiB, under every byte bound) is refused by the object bound of 4 MiB before the blob is
// inflated: the writer allocates far less than the blob's size.
func TestFetchRefusesZlibBomb(t *testing.T) {
	url, _ := hostileRepo(t, "bomb", "head -c 67108864 /dev/zero > zeros.bin")
	refusedWithinObjectBound(t, url, "a 64 MiB zero blob")
}

// refusedWithinObjectBound fetches url with a 4 MiB object bound and fails t unless the fetch is
// refused with ErrFetchTooLarge naming the flag while allocating at most 16 MiB; what names the
// 64 MiB object for the failure message.
func refusedWithinObjectBound(t *testing.T, url, what string) {
	t.Helper()
	runtime.GC()
	before := allocated()
	err := fetchError(t, url, Config{MaxFetchObjectBytes: 4 << 20})
	grew := allocated() - before
	t.Logf("allocated %d KiB while fetching", grew>>10)
	if !errors.Is(err, ErrFetchTooLarge) || !strings.Contains(err.Error(), FlagMaxFetchObjectBytes) {
		t.Fatalf("fetch of %s with a 4 MiB object bound: %v; want ErrFetchTooLarge naming %s", what, err, FlagMaxFetchObjectBytes)
	}
	const bound = 16 << 20
	t.Logf("%v (allocation bound %d KiB)", err, bound>>10)
	if grew > bound {
		t.Fatalf("allocated %d MiB while refusing %s; want at most %d MiB", grew>>20, what, bound>>20)
	}
}

// TestFetchRefusesManySmallBombs: objects each under the bound but together over it are refused
// too, before any is stored.
func TestFetchRefusesManySmallBombs(t *testing.T) {
	url, _ := hostileRepo(t, "bombs", "for i in 1 2 3 4 5 6 7 8; do { echo $i; head -c 1048576 /dev/zero; } > zeros-$i.bin; done")
	err := fetchError(t, url, Config{MaxFetchObjectBytes: 4 << 20})
	if !errors.Is(err, ErrFetchTooLarge) || !strings.Contains(err.Error(), FlagMaxFetchObjectBytes) {
		t.Fatalf("fetch of 8 blobs of 1 MiB with a 4 MiB object bound: %v; want ErrFetchTooLarge naming %s", err, FlagMaxFetchObjectBytes)
	}
}

// TestFetchWithinBoundsStillWorks: a repository under both bounds opens, and its files are
// there (the pack goes through the checked path, deltas included).
func TestFetchWithinBoundsStillWorks(t *testing.T) {
	// Similar files, so the remote sends some of them as deltas.
	script := "for i in $(seq 1 40); do seq 1 2000 > f-$i.txt; echo $i >> f-$i.txt; done"
	url, bare := hostileRepo(t, "fine", script)
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, MaxFetchBytes: 1 << 20, MaxFetchObjectBytes: 4 << 20})
	if err := w.Enqueue(context.Background(), upsert("ns/core/configmaps/a.yaml", "a\n", "1")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if st := w.Status(); st.LastPushedCommit == "" {
			return fmt.Errorf("nothing pushed yet: %w", st.LastError)
		}
		return nil
	})
	files := gitOut(t, "", "--git-dir", bare, "ls-tree", "-r", "--name-only", "main")
	for _, f := range []string{"README.md", "f-1.txt", "f-40.txt", "ns/core/configmaps/a.yaml"} {
		if !strings.Contains(files+"\n", f+"\n") {
			t.Fatalf("after the push the branch holds %q; want %s kept", files, f)
		}
	}
}

// deltaBombRepo is a real git remote on loopback whose branch main holds a 64 MiB blob of
// zeros stored as a delta of 1 KiB instructions on a 64 KiB blob: the pack the remote sends
// (it reuses the delta) is a few KiB, every object's declared size is small, and only the
// delta's declared result is large.
func deltaBombRepo(t *testing.T) string {
	t.Helper()
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo("deltabomb", "main")
	if err != nil {
		t.Fatal(err)
	}
	bare := remote.RepoDir("deltabomb")
	pack := bytes.NewBuffer(deltaBombPack())
	cmd := exec.Command("git", "index-pack", "--stdin")
	cmd.Dir, cmd.Stdin = bare, pack
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git index-pack: %v: %s", err, out)
	}
	zeros := gitHashZeros(t, bombSize)
	cmd = exec.Command("git", "mktree")
	cmd.Dir, cmd.Stdin = bare, strings.NewReader("100644 blob "+zeros+"\tzeros.bin\n")
	tree, err := cmd.Output()
	if err != nil {
		t.Fatalf("git mktree: %v", err)
	}
	commit := gitOut(t, bare, "commit-tree", strings.TrimSpace(string(tree)), "-m", "zeros")
	gitOut(t, bare, "update-ref", "refs/heads/main", commit)
	return url
}

// bombSize is the size of the delta bomb's result.
const bombSize = 64 << 20

// deltaBombPack is a pack of a 64 KiB blob of zeros and an OFS delta on it whose result is
// bombSize zeros.
func deltaBombPack() []byte {
	const baseSize = 1 << 16
	var delta []byte
	delta = binary.AppendUvarint(delta, baseSize)
	delta = binary.AppendUvarint(delta, bombSize)
	// 0x80 alone copies 64 KiB from offset 0 of the base.
	delta = append(delta, bytes.Repeat([]byte{0x80}, bombSize/baseSize)...)
	var pack bytes.Buffer
	pack.WriteString("PACK")
	_ = binary.Write(&pack, binary.BigEndian, [2]uint32{2, 2})
	baseOffset := pack.Len()
	packObject(&pack, 3, baseSize, nil, make([]byte, baseSize)) // blob
	distance := pack.Len() - baseOffset
	packObject(&pack, 6, len(delta), ofsDeltaDistance(distance), delta) // OFS delta
	sum := sha1.Sum(pack.Bytes())
	pack.Write(sum[:])
	return pack.Bytes()
}

// TestCheckPackCountsDeltaResults: the check reads a delta's declared result, not only the
// small sizes every object of the pack declares.
func TestCheckPackCountsDeltaResults(t *testing.T) {
	pack := deltaBombPack()
	var tooLarge *objectsTooLarge
	if err := checkPack(pack, 4<<20); !errors.As(err, &tooLarge) {
		t.Fatalf("check of a %d-byte pack resolving to 64 MiB with a 4 MiB bound: %v; want objectsTooLarge", len(pack), err)
	}
	if err := checkPack(pack, bombSize+1<<20); err != nil {
		t.Fatalf("check with a bound above the result: %v", err)
	}
	if err := checkPack(pack[:len(pack)-10], bombSize+1<<20); err == nil {
		t.Fatal("check of a pack cut short passed")
	}
}

// gitHashZeros is the blob hash of n zero bytes.
func gitHashZeros(t *testing.T, n int) string {
	t.Helper()
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", n)
	zero := make([]byte, 1<<16)
	for n > 0 {
		k := min(n, len(zero))
		h.Write(zero[:k])
		n -= k
	}
	return hex.EncodeToString(h.Sum(nil))
}

// packObject appends one object: its type and size header, the OFS delta's distance when
// given, and its zlib-compressed data.
func packObject(w *bytes.Buffer, typ byte, size int, distance, data []byte) {
	b := typ<<4 | byte(size&0x0f)
	size >>= 4
	for size > 0 {
		w.WriteByte(b | 0x80)
		b = byte(size & 0x7f)
		size >>= 7
	}
	w.WriteByte(b)
	w.Write(distance)
	zw := zlib.NewWriter(w)
	_, _ = zw.Write(data)
	_ = zw.Close()
}

// ofsDeltaDistance encodes the distance back to an OFS delta's base as git does.
func ofsDeltaDistance(n int) []byte {
	out := []byte{byte(n & 0x7f)}
	for n >>= 7; n > 0; n >>= 7 {
		n--
		out = append([]byte{0x80 | byte(n&0x7f)}, out...)
	}
	return out
}

// TestFetchRefusesDeltaBomb: a delta whose declared result is 64 MiB, sent in a pack of a few
// KiB whose objects all declare small sizes, is refused by the 4 MiB object bound before it is
// resolved.
func TestFetchRefusesDeltaBomb(t *testing.T) {
	refusedWithinObjectBound(t, deltaBombRepo(t), "a 64 MiB delta result")
}

// endlessSSHRemote is an SSH server on loopback that accepts any client key and answers
// git-upload-pack with a reference advertisement that never ends (go-git keeps every reference
// it reads). It returns the server's address, the Secret data to reach it, and the bytes it
// managed to send.
func endlessSSHRemote(t *testing.T) (string, map[string][]byte, *atomic.Int64) {
	t.Helper()
	l := testenv.LoopbackListener(t)
	secret := sshSecret(t, l.Addr().String())
	// sshSecret's known_hosts line is for its identity's key: the server uses it as host key.
	hostKey, err := ssh.ParsePrivateKey(secret[KeyIdentity])
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) { return nil, nil }}
	cfg.AddHostKey(hostKey)
	var sent atomic.Int64
	serve := func(c net.Conn) {
		defer c.Close()
		_, chans, reqs, err := ssh.NewServerConn(c, cfg)
		if err != nil {
			return
		}
		go ssh.DiscardRequests(reqs)
		for nc := range chans {
			ch, requests, err := nc.Accept()
			if err != nil {
				return
			}
			go func() {
				for r := range requests {
					_ = r.Reply(r.Type == "exec", nil)
					if r.Type != "exec" {
						continue
					}
					hash := strings.Repeat("1", 40)
					first := hash + " HEAD\x00multi_ack ofs-delta shallow no-progress\n"
					n, err := fmt.Fprintf(ch, "%04x%s", len(first)+4, first)
					sent.Add(int64(n))
					if err != nil {
						return
					}
					for i := 0; ; i++ {
						line := fmt.Sprintf("%s refs/heads/b%09d\n", hash, i)
						n, err := fmt.Fprintf(ch, "%04x%s", len(line)+4, line)
						sent.Add(int64(n))
						if err != nil {
							return
						}
					}
				}
			}()
		}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return l.Addr().String(), secret, &sent
}

// TestSSHFetchStopsPastByteLimit: an SSH remote that advertises references without end is cut
// off once it sent more than the 1 MiB bound, long before the timeout, and the error names the
// flag.
func TestSSHFetchStopsPastByteLimit(t *testing.T) {
	addr, secret, sent := endlessSSHRemote(t)
	url := "ssh://git@" + addr + "/org/repo.git"
	auth, err := Credentials(url, secret)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Auth: auth, Committer: Signature{"Mirror", "mirror@example.com"}, MaxFetchBytes: 1 << 20, Timeout: 30 * time.Second, RetryInterval: time.Hour})
	testenv.Eventually(t, 20*time.Second, func() error {
		if err := w.Status().LastError; err == nil {
			return fmt.Errorf("no error yet; the remote wrote %d KiB of payload", sent.Load()>>10)
		}
		return nil
	})
	err = w.Status().LastError
	t.Logf("%v; the remote wrote %d KiB of payload", err, sent.Load()>>10)
	if !errors.Is(err, ErrFetchTooLarge) || !strings.Contains(err.Error(), FlagMaxFetchBytes) {
		t.Fatalf("fetch from an endless SSH remote with a 1 MiB bound: %v; want ErrFetchTooLarge naming %s", err, FlagMaxFetchBytes)
	}
}
