package cli

import (
	"testing"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestMain gives the package's tests one shared API server (started on first use).
func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }
