package store

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// SecretCiphertextTTL is how long the ciphertext of an encrypted Secret is remembered without
// being used; it is refreshed on every use, so only Secrets gone for that long are forgotten
// (and re-encrypted once should they come back).
const SecretCiphertextTTL = 30 * 24 * time.Hour

// LookupSecretCiphertext returns the last ciphertext written for a Secret's file of a GitTarget
// and the HMAC of the plaintext it encrypts (see secretcrypt). A miss or an unreachable Redis
// means the Secret is encrypted anew.
//
// Key: <prefix>:secret:v1:target:<gitTargetUID>:<path>; value: hex HMAC, a newline, the SOPS
// file. Neither reveals the plaintext: the HMAC's key is never stored here.
func (s *RedisStore) LookupSecretCiphertext(ctx context.Context, gitTargetUID, path string) (mac, ciphertext []byte, ok bool) {
	v, err := s.client.GetEx(ctx, s.secretKey(gitTargetUID, path), SecretCiphertextTTL).Result()
	if err != nil {
		return nil, nil, false
	}
	h, body, found := strings.Cut(v, "\n")
	if !found {
		return nil, nil, false
	}
	mac, err = hex.DecodeString(h)
	if err != nil || len(mac) == 0 {
		return nil, nil, false
	}
	return mac, []byte(body), true
}

// RecordSecretCiphertext remembers the ciphertext written for a Secret's file and the HMAC of
// its plaintext.
func (s *RedisStore) RecordSecretCiphertext(ctx context.Context, gitTargetUID, path string, mac, ciphertext []byte) error {
	if len(mac) == 0 {
		return errors.New("record secret ciphertext: empty HMAC")
	}
	v := hex.EncodeToString(mac) + "\n" + string(ciphertext)
	if err := s.client.Set(ctx, s.secretKey(gitTargetUID, path), v, SecretCiphertextTTL).Err(); err != nil {
		return fmt.Errorf("record the ciphertext of %s for GitTarget %s: %w", path, gitTargetUID, err)
	}
	return nil
}

func (s *RedisStore) secretKey(gitTargetUID, path string) string {
	return s.prefix + ":secret:v1:target:" + escapeKeyField(gitTargetUID) + ":" + escapeKeyField(path)
}
