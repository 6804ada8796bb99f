package secretcrypt

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// HashKeyField is the key of the hash key Secret that holds the key (32 random bytes or more).
const HashKeyField = "hash-key"

// TargetHashKey derives the HMAC key of one GitTarget from the manager's hash key, so no two
// targets' HMACs can be compared with each other.
func TargetHashKey(master []byte, targetUID string) []byte {
	h := hmac.New(sha256.New, master)
	h.Write([]byte("siteops mirror secret hash\x00"))
	h.Write([]byte(targetUID))
	return h.Sum(nil)
}

// The hash key Secret is read anywhere it is named; creating it is granted only in the manager's
// own namespace (a Role the chart adds), so the mirror holds no cluster-wide Secret write.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// HashKeys loads the manager's hash key once, from a Secret it creates when missing. Without a
// Secret (Ref empty) the key is random and lives as long as the process: the mirror still
// never commits plaintext, but after a restart every Secret is re-encrypted once.
type HashKeys struct {
	// Reader reads the Secret (uncached: the manager does not cache Secrets); Writer creates it.
	Reader client.Reader
	Writer client.Writer
	// Ref names the Secret; empty keeps the key in memory only.
	Ref types.NamespacedName

	mu  sync.Mutex
	key []byte
}

// Key returns the manager's hash key, loading or creating it on first use.
func (k *HashKeys) Key(ctx context.Context) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return k.key, nil
	}
	if k.Ref.Name == "" {
		key, err := randomKey()
		if err != nil {
			return nil, err
		}
		k.key = key
		return key, nil
	}
	key, err := k.load(ctx)
	if err != nil {
		return nil, err
	}
	k.key = key
	return key, nil
}

func (k *HashKeys) load(ctx context.Context) ([]byte, error) {
	var s corev1.Secret
	err := k.Reader.Get(ctx, k.Ref, &s)
	switch {
	case err == nil:
		key := s.Data[HashKeyField]
		if len(key) < 32 {
			return nil, fmt.Errorf("the Secret %s holds no %q of at least 32 bytes: delete it to have a new key made, or fill it", k.Ref, HashKeyField)
		}
		return key, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("read the mirror's hash key Secret %s: %w", k.Ref, err)
	}
	key, err := randomKey()
	if err != nil {
		return nil, err
	}
	s = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.Ref.Namespace, Name: k.Ref.Name, Labels: map[string]string{"app.kubernetes.io/managed-by": "siteops"}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{HashKeyField: key},
	}
	if err := k.Writer.Create(ctx, &s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Another replica made it first: use theirs.
			return k.load(ctx)
		}
		return nil, fmt.Errorf("create the mirror's hash key Secret %s: %w", k.Ref, err)
	}
	return key, nil
}

func randomKey() ([]byte, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, errors.New("generate the mirror's hash key: no randomness")
	}
	return key, nil
}
