package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
)

// ReasonSigningKeyInvalid is the Ready reason of a GitProvider (and its GitTargets) whose
// spec.signing key cannot be read or used; nothing is committed until it can.
const ReasonSigningKeyInvalid = "SigningKeyInvalid"

// DefaultSigningKey is the Secret key of the signing key when spec.signing.key is empty.
const DefaultSigningKey = "signingKey"

var signingFormats = map[mirrorv1alpha1.SigningFormat]gitwriter.SigningFormat{
	mirrorv1alpha1.SigningSSH:     gitwriter.SigningSSH,
	mirrorv1alpha1.SigningOpenPGP: gitwriter.SigningOpenPGP,
}

// loadSigner reads the provider's signing key and returns its signer and a version that changes
// whenever the key's Secret or the signing settings do; nil and "" when the provider does not
// sign. The Secret is read from the provider's own namespace only (the reference has no
// namespace): a tenant cannot sign with another namespace's key. Messages name the Secret and
// its key, never their content.
func loadSigner(ctx context.Context, reader client.Reader, p *mirrorv1alpha1.GitProvider) (gitwriter.Signer, string, error) {
	sg := p.Spec.Signing
	if sg == nil {
		return nil, "", nil
	}
	invalid := func(format string, args ...any) error {
		return &targetProblem{ReasonSigningKeyInvalid, fmt.Sprintf("GitProvider %s spec.signing: ", p.Name) + fmt.Sprintf(format, args...)}
	}
	format, ok := signingFormats[sg.Format]
	if !ok {
		return nil, "", invalid("unknown format %q (use SSH or OpenPGP)", sg.Format)
	}
	if sg.SecretRef.Name == "" {
		return nil, "", invalid("secretRef.name is empty: name the Secret holding the private key")
	}
	key := sg.Key
	if key == "" {
		key = DefaultSigningKey
	}
	var s corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: sg.SecretRef.Name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", invalid("Secret %s not found in namespace %s", sg.SecretRef.Name, p.Namespace)
		}
		return nil, "", fmt.Errorf("read the signing Secret %s of GitProvider %s: %w", sg.SecretRef.Name, p.Name, err)
	}
	if len(s.Data[key]) == 0 {
		return nil, "", invalid("Secret %s has no key %q holding the private key", s.Name, key)
	}
	var passphrase []byte
	if sg.PassphraseKey != "" {
		if passphrase = s.Data[sg.PassphraseKey]; len(passphrase) == 0 {
			return nil, "", invalid("Secret %s has no key %q holding the passphrase", s.Name, sg.PassphraseKey)
		}
	}
	signer, err := gitwriter.NewSigner(format, s.Data[key], passphrase)
	if err != nil {
		// NewSigner's errors describe the key's kind and state, never its bytes.
		return nil, "", invalid("Secret %s key %q: %v", s.Name, key, err)
	}
	return signer, fmt.Sprintf("%s/%s/%s/%s/%s", sg.Format, s.Name, key, sg.PassphraseKey, s.ResourceVersion), nil
}
