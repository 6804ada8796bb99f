// Package simpods runs many simulated site pods for benchmarks: each listens on its own
// loopback address, reads a whole reload push and answers 100 ms after it arrived, as a site
// runtime on a busy node would. They run in a child process (the test binary started again), so
// the memory and CPU a benchmark measures are the notifier's alone, as in the manager.
package simpods

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/testenv"
)

// Answer is how long after a request arrived a simulated pod answers it.
const Answer = 100 * time.Millisecond

// Environment of the child process: how many pods to serve and the Accept-Encoding they
// advertise (none when empty).
const (
	envPods   = "SITEOPS_SIM_PODS"
	envAccept = "SITEOPS_SIM_PODS_ACCEPT"
)

// Pod is the address of one simulated pod.
type Pod struct {
	IP   string
	Port int32
}

// Main serves simulated pods, and exits, when this test binary was started by Start; otherwise
// it returns at once. Call it first in TestMain.
func Main() {
	n, err := strconv.Atoi(os.Getenv(envPods))
	if err != nil {
		return
	}
	serve(n, os.Getenv(envAccept))
	os.Exit(0)
}

// Start runs n simulated pods advertising accept ("br, gzip", or "" for plain JSON only) in a
// child process that lives until the test ends, and returns their addresses.
func Start(t testing.TB, n int, accept string) []Pod {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", envPods, n), envAccept+"="+accept)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the simulated pods: %v", err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	var pods []Pod
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
		addr, err := net.ResolveTCPAddr("tcp", sc.Text())
		if err != nil {
			t.Fatalf("simulated pod address %q: %v", sc.Text(), err)
		}
		pods = append(pods, Pod{IP: addr.IP.String(), Port: int32(addr.Port)})
	}
	if len(pods) != n {
		t.Fatalf("started %d of %d simulated pods (is TestMain calling simpods.Main?)", len(pods), n)
	}
	return pods
}

// serve listens on n loopback addresses, prints each "ip:port" on stdout, then "ready", and
// serves until stdin closes. Each pod reads the whole body and answers Answer after the request
// arrived: 200 when it got Content-Length bytes, 400 otherwise.
func serve(n int, accept string) {
	bufs := sync.Pool{New: func() any { return new([64 << 10]byte) }}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadline := time.Now().Add(Answer)
		if accept != "" {
			w.Header().Set("Accept-Encoding", accept)
		}
		buf := bufs.Get().(*[64 << 10]byte)
		var got int64
		for {
			k, err := r.Body.Read(buf[:])
			got += int64(k)
			if err != nil {
				break
			}
		}
		bufs.Put(buf)
		time.Sleep(time.Until(deadline))
		if got != r.ContentLength {
			http.Error(w, fmt.Sprintf("got %d of %d bytes", got, r.ContentLength), http.StatusBadRequest)
		}
	})
	out := bufio.NewWriter(os.Stdout)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(testenv.LoopbackIP(), "0"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go func() { _ = (&http.Server{Handler: h}).Serve(l) }()
		fmt.Fprintln(out, l.Addr().String())
	}
	fmt.Fprintln(out, "ready")
	_ = out.Flush()
	_, _ = io.Copy(io.Discard, os.Stdin)
}
