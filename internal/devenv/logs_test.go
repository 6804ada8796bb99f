package devenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/testenv"
)

// TestFollowerStreamsWholeLines: a log that appears later and is written in pieces reaches the
// stream as whole lines, each named after its component, and nothing after stop.
func TestFollowerStreamsWholeLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s3.log")
	var out testenv.SyncBuffer
	f := newFollower(&out)
	f.follow("s3", path)

	time.Sleep(300 * time.Millisecond) // the file does not exist yet on the first look
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, piece := range []string{"first li", "ne\nsecond line\n", "third"} {
		if _, err := file.WriteString(piece); err != nil {
			t.Fatal(err)
		}
	}
	want := "[s3] first line\n[s3] second line\n"
	deadline := time.Now().Add(5 * time.Second)
	for out.String() != want {
		if time.Now().After(deadline) {
			t.Fatalf("streamed %q, want %q (the unfinished third line held back)", out.String(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := file.WriteString(" line\n"); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for !strings.HasSuffix(out.String(), "[s3] third line\n") {
		if time.Now().After(deadline) {
			t.Fatalf("streamed %q, want the completed third line", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	before := out.String()
	if _, err := file.WriteString("after stop\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if out.String() != before {
		t.Fatalf("streamed after stop: %q", strings.TrimPrefix(out.String(), before))
	}
}
