package source

import (
	"time"

	"github.com/siteops/siteops/internal/egress"
)

func newGit(p *egress.Policy, timeout time.Duration, l Limits) *Git {
	return &Git{Egress: p, Timeout: timeout, Limits: l}
}

func newGitHub(api, archive string, p *egress.Policy, timeout time.Duration, l Limits) *GitHub {
	return &GitHub{APIURL: api, ArchiveURL: archive, Egress: p, Timeout: timeout, Limits: l}
}
