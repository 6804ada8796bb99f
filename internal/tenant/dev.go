package tenant

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/siteops/siteops/internal/servers"
)

// StartDevValkey starts a local Redis master, one replica and three Sentinels under dir (for
// `siteops dev up`) and points o at them. The caller stops the returned set when done.
func StartDevValkey(ctx context.Context, dir string, o *Options) (*servers.SentinelSet, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("generate local Valkey admin password: %w", err)
	}
	password := hex.EncodeToString(b)
	set, err := servers.StartSentinelSet(ctx, servers.SentinelSetOptions{Dir: dir, Replicas: 1, Password: password})
	if err != nil {
		return nil, fmt.Errorf("start local Redis with Sentinel: %w", err)
	}
	o.URL = ""
	o.SentinelAddrs = set.SentinelAddrs()
	o.SentinelMaster = set.MasterName
	o.AdminUsername = ""
	o.AdminPassword = password
	return set, nil
}
