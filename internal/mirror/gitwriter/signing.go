package gitwriter

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"
)

// Signer signs the encoded form of a commit (without its signature header) and returns the
// armored signature git stores in the commit's gpgsig header. go-git's git.Signer has the same
// shape, so its signers fit too.
type Signer interface {
	Sign(message io.Reader) ([]byte, error)
}

// SigningFormat names a commit signature format.
type SigningFormat string

// Signature formats, as git's gpg.format names them.
const (
	SigningSSH     SigningFormat = "ssh"
	SigningOpenPGP SigningFormat = "openpgp"
)

// ErrSigningKey marks a signing key that cannot be used; its message never carries key material.
var ErrSigningKey = errors.New("the signing key cannot be used")

// NewSigner parses a private key for format: an OpenSSH (or PEM) private key for SigningSSH, an
// armored OpenPGP secret key for SigningOpenPGP. passphrase decrypts an encrypted key; empty for
// none. A signature is made once here, so a key that parses but cannot sign fails now, not at
// the first commit. Errors wrap ErrSigningKey.
func NewSigner(format SigningFormat, key, passphrase []byte) (Signer, error) {
	var s Signer
	var err error
	switch format {
	case SigningSSH:
		s, err = newSSHSigner(key, passphrase)
	case SigningOpenPGP:
		s, err = newOpenPGPSigner(key, passphrase)
	default:
		err = fmt.Errorf("unknown signing format %q (use %q or %q)", format, SigningSSH, SigningOpenPGP)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSigningKey, err)
	}
	if _, err := s.Sign(strings.NewReader("siteops signing key check\n")); err != nil {
		return nil, fmt.Errorf("%w: a test signature failed: %s", ErrSigningKey, keyErrorText(err))
	}
	return s, nil
}

// keyErrorText keeps the kind of a parse failure but never its text beyond one short line:
// crypto libraries do not quote keys, yet a Secret's content is not to be echoed in status.
func keyErrorText(err error) string {
	msg := err.Error()
	if i := strings.IndexAny(msg, "\n\r"); i >= 0 {
		msg = msg[:i]
	}
	if len(msg) > 120 {
		msg = msg[:120]
	}
	return msg
}

// sshSigner makes SSH signatures in the SSHSIG format (OpenSSH's PROTOCOL.sshsig) with the
// namespace "git", as `ssh-keygen -Y sign -n git` does and `git verify-commit` checks with
// gpg.format=ssh.
type sshSigner struct {
	signer ssh.Signer
}

const (
	sshsigMagic     = "SSHSIG"
	sshsigVersion   = 1
	sshsigNamespace = "git"
	sshsigHash      = "sha512"
)

func newSSHSigner(key, passphrase []byte) (*sshSigner, error) {
	if len(bytes.TrimSpace(key)) == 0 {
		return nil, errors.New("the ssh private key is empty")
	}
	var s ssh.Signer
	var err error
	if len(passphrase) > 0 {
		s, err = ssh.ParsePrivateKeyWithPassphrase(key, passphrase)
	} else {
		s, err = ssh.ParsePrivateKey(key)
	}
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing):
		return nil, errors.New("the ssh private key is encrypted and no passphrase was given")
	case errors.Is(err, x509.IncorrectPasswordError):
		return nil, errors.New("the passphrase does not decrypt the ssh private key")
	case err != nil:
		return nil, fmt.Errorf("parse the ssh private key: %s", keyErrorText(err))
	}
	return &sshSigner{signer: s}, nil
}

// Sign returns the armored SSHSIG signature of message.
func (s *sshSigner) Sign(message io.Reader) ([]byte, error) {
	h := sha512.New()
	if _, err := io.Copy(h, message); err != nil {
		return nil, fmt.Errorf("hash the commit: %w", err)
	}
	signed := ssh.Marshal(struct {
		Namespace, Reserved, HashAlgorithm string
		Hash                               []byte
	}{sshsigNamespace, "", sshsigHash, h.Sum(nil)})
	signed = append([]byte(sshsigMagic), signed...)
	sig, err := s.sign(signed)
	if err != nil {
		return nil, fmt.Errorf("sign the commit: %w", err)
	}
	blob := ssh.Marshal(struct {
		Version                            uint32
		PublicKey                          []byte
		Namespace, Reserved, HashAlgorithm string
		Signature                          []byte
	}{sshsigVersion, s.signer.PublicKey().Marshal(), sshsigNamespace, "", sshsigHash, ssh.Marshal(sig)})
	blob = append([]byte(sshsigMagic), blob...)
	return armorSSHSig(blob), nil
}

// sign signs data with the key; RSA keys use rsa-sha2-512, since ssh-keygen refuses SHA-1
// ssh-rsa signatures.
func (s *sshSigner) sign(data []byte) (*ssh.Signature, error) {
	if as, ok := s.signer.(ssh.AlgorithmSigner); ok && s.signer.PublicKey().Type() == ssh.KeyAlgoRSA {
		return as.SignWithAlgorithm(rand.Reader, data, ssh.KeyAlgoRSASHA512)
	}
	return s.signer.Sign(rand.Reader, data)
}

// armorSSHSig wraps a signature blob the way ssh-keygen writes it: base64 in 70-column lines
// between BEGIN and END SSH SIGNATURE lines.
func armorSSHSig(blob []byte) []byte {
	enc := base64.StdEncoding.EncodeToString(blob)
	var b bytes.Buffer
	b.WriteString("-----BEGIN SSH SIGNATURE-----\n")
	for len(enc) > 70 {
		b.WriteString(enc[:70])
		b.WriteByte('\n')
		enc = enc[70:]
	}
	b.WriteString(enc)
	b.WriteString("\n-----END SSH SIGNATURE-----\n")
	return b.Bytes()
}

// openPGPSigner makes armored detached OpenPGP signatures, as gpg does for git.
type openPGPSigner struct {
	entity *openpgp.Entity
}

func newOpenPGPSigner(key, passphrase []byte) (*openPGPSigner, error) {
	if len(bytes.TrimSpace(key)) == 0 {
		return nil, errors.New("the OpenPGP private key is empty")
	}
	ring, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(key))
	if err != nil {
		return nil, fmt.Errorf("read the armored OpenPGP key: %s", keyErrorText(err))
	}
	if len(ring) != 1 {
		return nil, fmt.Errorf("the OpenPGP key holds %d keys; give exactly one", len(ring))
	}
	e := ring[0]
	if e.PrivateKey == nil {
		return nil, errors.New("the OpenPGP key is a public key; give the secret key (gpg --export-secret-keys --armor)")
	}
	k, ok := e.SigningKey(time.Now())
	if !ok || k.PrivateKey == nil {
		return nil, errors.New("the OpenPGP key has no valid signing key (expired, revoked or not for signing)")
	}
	if k.PrivateKey.Encrypted {
		if len(passphrase) == 0 {
			return nil, errors.New("the OpenPGP key is encrypted and no passphrase was given")
		}
		if err := e.DecryptPrivateKeys(passphrase); err != nil {
			return nil, errors.New("the passphrase does not decrypt the OpenPGP key")
		}
	}
	return &openPGPSigner{entity: e}, nil
}

// Sign returns the armored detached signature of message.
func (s *openPGPSigner) Sign(message io.Reader) ([]byte, error) {
	var b bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&b, s.entity, message, &packet.Config{}); err != nil {
		return nil, fmt.Errorf("sign the commit: %w", err)
	}
	return b.Bytes(), nil
}

// signCommit sets c's signature: the signer signs the commit's encoding without one.
func signCommit(s Signer, c *object.Commit) error {
	enc := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(enc); err != nil {
		return fmt.Errorf("encode the commit to sign: %w", err)
	}
	r, err := enc.Reader()
	if err != nil {
		return fmt.Errorf("encode the commit to sign: %w", err)
	}
	sig, err := s.Sign(r)
	if err != nil {
		return err
	}
	c.PGPSignature = string(sig)
	return nil
}
