package cli

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/verify"
)

func newMirrorCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "mirror", Short: "Check what the cluster→git mirror wrote"}
	cmd.AddCommand(newMirrorVerifyCommand())
	return cmd
}

func newMirrorVerifyCommand() *cobra.Command {
	var (
		repo, auditLog, since, ref, cluster, noreply string
		failOnMismatch, failOnMissed                 bool
	)
	cmd := &cobra.Command{
		Use:   "verify --repo URL|PATH --audit-log FILE [--since TIME]",
		Short: "Replay an API server audit log against the mirror's git history: is each change's author the user who made it?",
		Long: `verify reads the audit log the API server writes with --audit-log-path (JSON lines, one
audit.k8s.io/v1 Event each) and the mirror's git history, and checks every mirrored change: is
the commit's author the user the audit log names for the request that made the change? The
commits' Audit-ID and Attribution trailers say which request and which attribution result the
mirror used; changes without them are matched to the object's last write before the commit.

It prints precision (of the changes the mirror credited with a result, how many name the right
user) and recall (of the changes the audit log attributes to a class, how many the mirror
credited correctly) per attribution result, then lists the mismatches and the changes committed
without an author although the log names one. It exits non-zero when there are mismatches
(--fail-on-mismatch, default on) or misses (--fail-on-missed).`,
		Example: `  siteops mirror verify --repo ./cluster-state --audit-log /var/log/kubernetes/audit.log --since 24h
  siteops mirror verify --repo https://git.example.com/platform/cluster-state.git --ref main \
      --audit-log audit.log --since 2026-12-01T00:00:00Z --cluster prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if repo == "" || auditLog == "" {
				return errors.New("--repo and --audit-log are required")
			}
			rep, err := verifyAttribution(verifyOptions{repo: repo, auditLog: auditLog, since: since, ref: ref, cluster: cluster, noreply: noreply})
			if err != nil {
				return err
			}
			if err := rep.Print(cmd.OutOrStdout()); err != nil {
				return err
			}
			if err := rep.Err(failOnMismatch, failOnMissed); err != nil {
				return err
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&repo, "repo", "", "the mirror's git repository: a local path or a URL readable without prompting")
	fs.StringVar(&ref, "ref", "", "branch or revision to read (default HEAD, or the remote's default branch)")
	fs.StringVar(&auditLog, "audit-log", "", "the API server's audit log file (--audit-log-path, JSON lines)")
	fs.StringVar(&since, "since", "", "check only commits and audit events from this time: RFC 3339 (2026-12-01T10:00:00Z) or an age (24h)")
	fs.StringVar(&cluster, "cluster", "", "check only commits whose Cluster trailer names this cluster")
	fs.StringVar(&noreply, "author-noreply-domain", attribution.DefaultNoreplyDomain, "the mirror's --author-noreply-domain, to derive the author it writes for users without an email")
	fs.BoolVar(&failOnMismatch, "fail-on-mismatch", true, "exit non-zero when a change names another author than the audit log")
	fs.BoolVar(&failOnMissed, "fail-on-missed", false, "also exit non-zero when a change was committed without the author the audit log names")
	return cmd
}

// verifyOptions are what `mirror verify` and `ui --verify-repo` check the mirror's attribution
// with.
type verifyOptions struct {
	repo, auditLog, since, ref, cluster, noreply string
}

// verifyAttribution replays the audit log against the mirror's git history (verify.Verify).
func verifyAttribution(o verifyOptions) (*verify.Report, error) {
	from, err := parseSince(o.since, time.Now())
	if err != nil {
		return nil, err
	}
	f, err := os.Open(o.auditLog)
	if err != nil {
		return nil, fmt.Errorf("open the audit log: %w", err)
	}
	defer f.Close()
	log, err := verify.ReadAuditLog(f, from)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.auditLog, err)
	}
	r, err := verify.OpenRepository(o.repo)
	if err != nil {
		return nil, err
	}
	return verify.Verify(r, log, verify.Options{Since: from, Ref: o.ref, Cluster: o.cluster, Identity: attribution.Identity{NoreplyDomain: cmp.Or(o.noreply, attribution.DefaultNoreplyDomain)}})
}

// parseSince reads --since: an RFC 3339 time or an age before now; empty means the beginning.
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since %q: give an RFC 3339 time (2026-12-01T10:00:00Z) or an age (24h)", v)
}
