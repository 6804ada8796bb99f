package gitwriter

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
)

// Secret keys read by Credentials.
const (
	KeyIdentity      = "identity"
	KeySSHPrivateKey = "ssh-privatekey"
	KeyKnownHosts    = "known_hosts"
	KeyUsername      = "username"
	KeyPassword      = "password"
	KeyBearerToken   = "bearerToken"
)

// IsSSH reports whether a remote URL is reached over SSH (ssh://… or user@host:path).
func IsSSH(remote string) bool {
	if strings.HasPrefix(remote, "ssh://") {
		return true
	}
	return !strings.Contains(remote, "://") && strings.Contains(remote, "@") && strings.Contains(remote, ":")
}

// Credentials turns a Secret's data into a go-git auth method for remote. data may be nil (an
// anonymous HTTPS remote). SSH fails closed: without known_hosts there is no connection.
func Credentials(remote string, data map[string][]byte) (transport.AuthMethod, error) {
	if IsSSH(remote) {
		key := data[KeyIdentity]
		if len(key) == 0 {
			key = data[KeySSHPrivateKey]
		}
		if len(key) == 0 {
			return nil, fmt.Errorf("ssh remote %s needs a private key in the secret key %q or %q", remote, KeyIdentity, KeySSHPrivateKey)
		}
		if len(data[KeyKnownHosts]) == 0 {
			return nil, fmt.Errorf("ssh remote %s needs the host keys in the secret key %q: connections without host key checking are refused", remote, KeyKnownHosts)
		}
		auth, err := gitssh.NewPublicKeys(sshUser(remote), key, string(data[KeyPassword]))
		if err != nil {
			return nil, fmt.Errorf("parse the ssh private key: %w", err)
		}
		f, err := os.CreateTemp("", "siteops-known-hosts-*")
		if err != nil {
			return nil, fmt.Errorf("write known_hosts: %w", err)
		}
		defer func() { _ = os.Remove(f.Name()) }()
		if _, err := f.Write(data[KeyKnownHosts]); err != nil {
			f.Close()
			return nil, fmt.Errorf("write known_hosts: %w", err)
		}
		f.Close()
		// The callback reads the file now, so removing it afterwards is fine.
		cb, err := gitssh.NewKnownHostsCallback(f.Name())
		if err != nil {
			return nil, fmt.Errorf("parse known_hosts: %w", err)
		}
		auth.HostKeyCallback = cb
		return auth, nil
	}
	switch {
	case len(data[KeyBearerToken]) > 0:
		return &githttp.TokenAuth{Token: strings.TrimSpace(string(data[KeyBearerToken]))}, nil
	case len(data[KeyUsername]) > 0 || len(data[KeyPassword]) > 0:
		return &githttp.BasicAuth{Username: string(data[KeyUsername]), Password: string(data[KeyPassword])}, nil
	case data != nil && len(data[KeyIdentity]) > 0:
		return nil, errors.New("the secret holds an ssh key but the remote URL is https: use an ssh:// URL")
	}
	return nil, nil
}

func sshUser(remote string) string {
	if u, err := url.Parse(remote); err == nil && u.Scheme == "ssh" && u.User != nil {
		return u.User.Username()
	}
	if at := strings.Index(remote, "@"); at > 0 && !strings.Contains(remote, "://") {
		return remote[:at]
	}
	return "git"
}
