package push_test

import (
	"testing"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }
