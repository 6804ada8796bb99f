package devenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/siteops/siteops/internal/decofile/push"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
)

// announcePushes turns on the manager's push receiver on a loopback port with a fresh secret
// (kept in a file under dir, as a platform mounts it from a Secret) and makes the local git
// remote send it a push event after every push, as a hosted git server's webhook does: a push
// is delivered at once instead of at the Decofile's next interval.
func announcePushes(dir string, mo *manager.Options, git *servers.GitRemote) error {
	if mo.Decofile.Push.Enabled() {
		return nil // the caller configured its own receiver
	}
	addr, err := loopbackAddr()
	if err != nil {
		return err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return fmt.Errorf("make the push event secret: %w", err)
	}
	secret := []byte(hex.EncodeToString(raw))
	file := filepath.Join(dir, "push-webhook-secret")
	if err := os.WriteFile(file, secret, 0o600); err != nil {
		return fmt.Errorf("write the push event secret: %w", err)
	}
	mo.Decofile.Push.BindAddress, mo.Decofile.Push.SecretFile = addr, file
	git.AnnouncePushes("http://"+addr+push.Path, secret)
	return nil
}
