package gitwriter

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/testenv"
)

// TestRemoteAnswersNeverShow: a remote the platform allowed answers with error pages, a git
// error line and garbage, each carrying a marker. The writer's status and logs say what failed
// (the HTTP status, what to check) and never carry the marker.
func TestRemoteAnswersNeverShow(t *testing.T) {
	const marker = "REMOTE-WORDS-7f3a"
	cases := map[string]http.HandlerFunc{
		"401": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(marker))
		},
		"403": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(marker))
		},
		"404": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(marker))
		},
		"500": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(marker))
		},
		"garbage": func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(marker))
		},
		"err-line": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			line := "ERR " + marker + "\n"
			_, _ = w.Write([]byte(strings.ToLower(hex4(len(line)+4)) + line))
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			var requests atomic.Int64
			l := testenv.LoopbackListener(t)
			srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				h(w, r)
			})}
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { _ = srv.Close() })

			logs := &testenv.SyncBuffer{}
			log := funcr.New(func(prefix, args string) { fmt.Fprintln(logs, prefix+" "+args) }, funcr.Options{Verbosity: 10})
			w := New(Config{URL: "http://" + l.Addr().String() + "/org/repo.git", Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"},
				RetryInterval: 10 * time.Millisecond, Egress: localEgress(t)})
			ctx, cancel := context.WithCancel(logf.IntoContext(context.Background(), log))
			done := make(chan struct{})
			go func() { _ = w.Run(ctx); close(done) }()
			testenv.Eventually(t, 10*time.Second, func() error {
				if requests.Load() < 2 || w.Status().LastError == nil {
					return errString("no failed attempt yet")
				}
				return nil
			})
			cancel()
			<-done
			msg := w.Status().LastError.Error()
			if strings.Contains(msg, marker) {
				t.Fatalf("the writer's error quotes the remote: %s", msg)
			}
			if strings.Contains(logs.String(), marker) {
				t.Fatalf("the writer's logs quote the remote:\n%s", logs)
			}
			if code := strings.TrimPrefix(name, ""); len(code) == 3 && !strings.Contains(msg, "HTTP "+code) {
				t.Fatalf("error %q does not name the HTTP status %s", msg, code)
			}
			t.Logf("%s: %s", name, msg)
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func hex4(n int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[n>>12&0xf], digits[n>>8&0xf], digits[n>>4&0xf], digits[n&0xf]})
}

// localEgress allows what the tests' git remotes need: plain HTTP on loopback.
func localEgress(t testing.TB) *egress.Policy {
	t.Helper()
	return egress.MustNew(egress.Config{Schemes: []string{"https", "ssh", "http"}, Hosts: []string{"127.0.0.0/8"}})
}

// sshSecret is a Secret's data for an SSH remote at addr: a fresh identity and a known_hosts
// line (the remote's key is never checked here: no handshake gets that far).
func sshSecret(t *testing.T, addr string) map[string][]byte {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{KeyIdentity: pem.EncodeToMemory(block), KeyKnownHosts: []byte(knownhosts.Line([]string{addr}, sshPub) + "\n")}
}

// TestSSHRemoteThroughThePolicy: an SSH remote on loopback is refused before any connection
// (the listener accepts nothing), naming the setting; allowed, the connection goes through the
// same dialer and ends at the writer's timeout when the remote never answers.
func TestSSHRemoteThroughThePolicy(t *testing.T) {
	l := testenv.LoopbackListener(t)
	var accepted atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	url := "ssh://git@" + l.Addr().String() + "/org/repo.git"
	auth, err := Credentials(url, sshSecret(t, l.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	settings := egress.Settings{Hosts: "--git-allowed-hosts"}
	strict := egress.MustNew(egress.Config{Settings: settings})
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Auth: auth, Committer: Signature{"Mirror", "mirror@example.com"}, Egress: strict, RetryInterval: 10 * time.Millisecond})
	testenv.Eventually(t, 10*time.Second, func() error {
		err := w.Status().LastError
		if !egress.IsRefused(err) || !strings.Contains(err.Error(), "--git-allowed-hosts") {
			return errString("want a refusal naming --git-allowed-hosts, got " + errText(err))
		}
		return nil
	})
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the refused SSH remote got %d connections", n)
	}

	allowed := egress.MustNew(egress.Config{Hosts: []string{l.Addr().String()}, Settings: settings})
	start := time.Now()
	w, _ = startWriter(t, Config{URL: url, Branch: "main", Auth: auth, Committer: Signature{"Mirror", "mirror@example.com"}, Egress: allowed, Timeout: time.Second, RetryInterval: time.Hour})
	testenv.Eventually(t, 10*time.Second, func() error {
		err := w.Status().LastError
		if err == nil || !strings.Contains(err.Error(), "no complete answer within 1s") {
			return errString("want the timeout, got " + errText(err))
		}
		return nil
	})
	if accepted.Load() == 0 {
		t.Fatal("the allowed SSH remote was never dialled")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("an SSH remote that never answers held the fetch %s with a 1s timeout", took)
	}
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// TestCheckRemote: what is known before connecting (scheme, an IP address as host) is refused
// with the setting to change; names wait for the connection.
func TestCheckRemote(t *testing.T) {
	p := egress.MustNew(egress.Config{Settings: egress.Settings{Hosts: "--git-allowed-hosts", Private: "--git-allow-private-networks", Schemes: "--git-allowed-schemes"}})
	for url, want := range map[string][]string{
		"https://git.example.com/org/repo.git":         nil,
		"git@git.example.com:org/repo.git":             nil,
		"https://localhost/org/repo.git":               nil, // a name: checked when connecting
		"http://git.example.com/org/repo.git":          {"scheme", "--git-allowed-schemes"},
		"https://169.254.169.254/latest/meta-data":     {"link-local", "--git-allowed-hosts"},
		"git@10.0.0.5:org/repo.git":                    {"private", "--git-allow-private-networks"},
		"ssh://git@[::1]:2222/org/repo.git":            {"loopback", "--git-allowed-hosts"},
		"https://user:s3cret@127.0.0.1/org/repo.git":   {"loopback"},
		"https://[::ffff:127.0.0.1]:8443/org/repo.git": {"loopback"},
	} {
		err := CheckRemote(p, url)
		if (err == nil) != (want == nil) || (err != nil && !egress.IsRefused(err)) {
			t.Errorf("%s: %v", url, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not mention %q", url, err, w)
			}
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the refusal shows the URL's password: %v", url, err)
		}
	}
}
