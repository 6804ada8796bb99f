package gitwriter

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"golang.org/x/crypto/ssh"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// sshKey returns a private key of kind in OpenSSH format (encrypted with passphrase when set)
// and its authorized_keys line.
func sshKey(t *testing.T, kind string, passphrase []byte) ([]byte, string) {
	t.Helper()
	var priv crypto.PrivateKey
	var err error
	switch kind {
	case "ed25519":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	case "rsa":
		priv, err = rsa.GenerateKey(rand.Reader, 3072)
	case "ecdsa":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	var block *pem.Block
	if passphrase != nil {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "mirror", passphrase)
	} else {
		block, err = ssh.MarshalPrivateKey(priv, "mirror")
	}
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
}

// pgpKey returns an armored OpenPGP secret key (encrypted with passphrase when set) and its
// armored public key.
func pgpKey(t *testing.T, passphrase []byte) ([]byte, []byte) {
	t.Helper()
	e, err := openpgp.NewEntity("Mirror Bot", "", "mirror@example.com", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	var pub bytes.Buffer
	w, _ := armor.Encode(&pub, openpgp.PublicKeyType, nil)
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if passphrase != nil {
		if err := e.EncryptPrivateKeys(passphrase, nil); err != nil {
			t.Fatal(err)
		}
	}
	var sec bytes.Buffer
	w, _ = armor.Encode(&sec, openpgp.PrivateKeyType, nil)
	if err := e.SerializePrivateWithoutSigning(w, nil); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	return sec.Bytes(), pub.Bytes()
}

// gitEnv runs git with extra environment and returns its output and error.
func gitEnv(env []string, dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// signedWriter starts a writer signing with signer on a fresh repository, makes two commits and
// returns the bare repository.
func signedWriter(t *testing.T, signer Signer) string {
	t.Helper()
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	name := testenv.Name(t)
	url, err := remote.CreateRepo(name, "main")
	if err != nil {
		t.Fatal(err)
	}
	bare := remote.RepoDir(name)
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror Bot", "mirror@example.com"}, Window: 0, Signer: signer})
	ctx := context.Background()
	for i, op := range []Op{upsert("ns/core/configmaps/a.yaml", "a: 1\n", "1"), upsert("ns/core/configmaps/b.yaml", "b: 1\n", "2")} {
		if err := w.Enqueue(ctx, op); err != nil {
			t.Fatal(i, err)
		}
	}
	waitCommits(t, bare, 2)
	return bare
}

// splitSigned returns a commit's signature and the payload it signs (the commit without its
// gpgsig header), as git hands them to ssh-keygen or gpg.
func splitSigned(t *testing.T, raw string) (payload, sig string) {
	t.Helper()
	head, body, _ := strings.Cut(raw, "\n\n")
	var keep, sigLines []string
	inSig := false
	for _, l := range strings.Split(head, "\n") {
		switch {
		case strings.HasPrefix(l, "gpgsig "):
			inSig = true
			sigLines = append(sigLines, strings.TrimPrefix(l, "gpgsig "))
		case inSig && strings.HasPrefix(l, " "):
			sigLines = append(sigLines, l[1:])
		default:
			inSig = false
			keep = append(keep, l)
		}
	}
	if len(sigLines) == 0 {
		t.Fatalf("commit is not signed:\n%s", raw)
	}
	return strings.Join(keep, "\n") + "\n\n" + body, strings.Join(sigLines, "\n") + "\n"
}

func TestWriterSignsEveryCommitWithSSHKeys(t *testing.T) {
	for _, kind := range []string{"ed25519", "rsa", "ecdsa"} {
		t.Run(kind, func(t *testing.T) {
			var passphrase []byte
			if kind == "ed25519" {
				passphrase = []byte("correct horse")
			}
			key, pub := sshKey(t, kind, passphrase)
			signer, err := NewSigner(SigningSSH, key, passphrase)
			if err != nil {
				t.Fatal(err)
			}
			bare := signedWriter(t, signer)
			allowed := filepath.Join(t.TempDir(), "allowed_signers")
			if err := os.WriteFile(allowed, []byte(`mirror@example.com namespaces="git" `+pub+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := []string{"-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile=" + allowed, "--git-dir", bare}
			for _, c := range strings.Fields(gitOut(t, "", "--git-dir", bare, "rev-list", "main")) {
				out, err := gitEnv(nil, "", append(cfg, "verify-commit", "-v", c)...)
				if err != nil || !strings.Contains(out, `Good "git" signature for mirror@example.com`) {
					t.Fatalf("git verify-commit %s: %v\n%s", c, err, out)
				}
				// The same signature checked by ssh-keygen directly, in namespace git.
				raw, err := exec.Command("git", "--git-dir", bare, "cat-file", "commit", c).Output()
				if err != nil {
					t.Fatal(err)
				}
				payload, sig := splitSigned(t, string(raw))
				sigFile := filepath.Join(t.TempDir(), "commit.sig")
				if err := os.WriteFile(sigFile, []byte(sig), 0o600); err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command("ssh-keygen", "-Y", "verify", "-f", allowed, "-I", "mirror@example.com", "-n", "git", "-s", sigFile)
				cmd.Stdin = strings.NewReader(payload)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("ssh-keygen -Y verify: %v\n%s", err, out)
				}
				// A changed payload does not verify: the signature covers the commit.
				cmd = exec.Command("ssh-keygen", "-Y", "verify", "-f", allowed, "-I", "mirror@example.com", "-n", "git", "-s", sigFile)
				cmd.Stdin = strings.NewReader(strings.Replace(payload, "Mirror Bot", "Mallory", 1))
				if out, err := cmd.CombinedOutput(); err == nil {
					t.Fatalf("ssh-keygen verified a changed commit:\n%s", out)
				}
			}
		})
	}
}

func TestWriterSignsEveryCommitWithOpenPGPKeys(t *testing.T) {
	for name, passphrase := range map[string][]byte{"plain": nil, "encrypted": []byte("correct horse")} {
		t.Run(name, func(t *testing.T) {
			sec, pub := pgpKey(t, passphrase)
			signer, err := NewSigner(SigningOpenPGP, sec, passphrase)
			if err != nil {
				t.Fatal(err)
			}
			bare := signedWriter(t, signer)
			home, err := os.MkdirTemp("", "gpg")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = exec.Command("gpgconf", "--homedir", home, "--kill", "all").Run()
				_ = os.RemoveAll(home)
			})
			env := []string{"GNUPGHOME=" + home}
			cmd := exec.Command("gpg", "--batch", "--import")
			cmd.Env = append(os.Environ(), env...)
			cmd.Stdin = bytes.NewReader(pub)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("gpg --import: %v\n%s", err, out)
			}
			for _, c := range strings.Fields(gitOut(t, "", "--git-dir", bare, "rev-list", "main")) {
				out, err := gitEnv(env, "", "--git-dir", bare, "verify-commit", "-v", c)
				if err != nil || !strings.Contains(out, `Good signature from "Mirror Bot <mirror@example.com>"`) {
					t.Fatalf("git verify-commit %s: %v\n%s", c, err, out)
				}
			}
		})
	}
}

func TestWriterCommitsNothingItCannotSign(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("unsigned", "main")
	bare := remote.RepoDir("unsigned")
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 0, Signer: signerFunc(func([]byte) ([]byte, error) { return nil, errors.New("the key is gone") })})
	_ = w.Enqueue(context.Background(), upsert("ns/core/configmaps/a.yaml", "a\n", "1"))
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := w.Status().LastError; err == nil || !strings.Contains(err.Error(), "signing key") {
			return errors.New("no signing error reported")
		}
		return nil
	})
	if w.Status().Pending != 1 {
		t.Fatalf("pending = %d, want the change kept", w.Status().Pending)
	}
	if out, err := gitEnv(nil, "", "--git-dir", bare, "rev-parse", "--verify", "-q", "main"); err == nil {
		t.Fatalf("an unsigned commit reached the remote: %s", out)
	}
}

// signerFunc signs with a function, here one that fails like a key that stopped working.
type signerFunc func([]byte) ([]byte, error)

func (f signerFunc) Sign(r io.Reader) ([]byte, error) {
	var b bytes.Buffer
	if _, err := b.ReadFrom(r); err != nil {
		return nil, err
	}
	return f(b.Bytes())
}

func TestNewSignerRefusesUnusableKeysWithoutQuotingThem(t *testing.T) {
	sshPlain, sshPub := sshKey(t, "ed25519", nil)
	sshEnc, _ := sshKey(t, "ed25519", []byte("right"))
	pgpSec, pgpPub := pgpKey(t, nil)
	pgpEnc, _ := pgpKey(t, []byte("right"))
	// A key cut short keeps most of its bytes: none of them may show in the message.
	truncated := sshPlain[:len(sshPlain)/2]
	cases := []struct {
		name       string
		format     SigningFormat
		key, pass  []byte
		wantInText string
	}{
		{"empty ssh", SigningSSH, nil, nil, "empty"},
		{"garbage ssh", SigningSSH, []byte("not a key at all"), nil, "parse the ssh private key"},
		{"truncated ssh", SigningSSH, truncated, nil, "parse the ssh private key"},
		{"public ssh key", SigningSSH, []byte(sshPub), nil, "parse the ssh private key"},
		{"encrypted ssh without passphrase", SigningSSH, sshEnc, nil, "no passphrase"},
		{"encrypted ssh wrong passphrase", SigningSSH, sshEnc, []byte("wrong"), "passphrase does not decrypt"},
		{"openpgp public key", SigningOpenPGP, pgpPub, nil, "public key"},
		{"openpgp garbage", SigningOpenPGP, []byte("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nAAAA\n-----END PGP PRIVATE KEY BLOCK-----\n"), nil, "read the armored OpenPGP key"},
		{"encrypted openpgp without passphrase", SigningOpenPGP, pgpEnc, nil, "no passphrase"},
		{"encrypted openpgp wrong passphrase", SigningOpenPGP, pgpEnc, []byte("wrong"), "passphrase does not decrypt"},
		{"ssh key as openpgp", SigningOpenPGP, sshPlain, nil, "OpenPGP"},
		{"unknown format", SigningFormat("x509"), pgpSec, nil, "unknown signing format"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewSigner(tc.format, tc.key, tc.pass)
			if !errors.Is(err, ErrSigningKey) || !strings.Contains(err.Error(), tc.wantInText) {
				t.Fatalf("err = %v, want ErrSigningKey saying %q", err, tc.wantInText)
			}
			for _, material := range [][]byte{tc.key, tc.pass} {
				for _, chunk := range keyChunks(material) {
					if strings.Contains(err.Error(), chunk) {
						t.Fatalf("the error quotes the key: %v", err)
					}
				}
			}
		})
	}
}

// keyChunks are 12-byte pieces of a key's base64 body lines, what a quoting error would show.
func keyChunks(key []byte) []string {
	var out []string
	for _, l := range strings.Split(string(key), "\n") {
		if len(l) < 24 || strings.HasPrefix(l, "-----") {
			continue
		}
		if _, err := base64.StdEncoding.DecodeString(l); err != nil && !strings.Contains(l, "AAAA") {
			continue
		}
		out = append(out, l[4:16])
	}
	return out
}
