package cli

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/siteops/siteops/internal/tenant"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/settings"
)

// doctorFlags are the manager's flags that say how to reach Valkey; the rest of the tenant
// part's flags mean nothing to a one-off check and are not offered.
var doctorFlags = []string{
	"valkey-sentinel-addrs", "valkey-sentinel-master", "valkey-sentinel-username", "valkey-sentinel-password",
	"valkey-url", "valkey-admin-username", "valkey-admin-password", "valkey-tls", "valkey-tls-ca-file", "valkey-allowed-nodes",
}

func newTenantDoctorCommand() *cobra.Command {
	var o tenant.Options
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that every Valkey node and Sentinel has the settings a node shared by tenants needs",
		Long: "Reads every master and replica the Sentinels report (or the --valkey-url node) with the admin " +
			"user (CONFIG GET, ACL GETUSER default) and pings every Sentinel without credentials, then prints " +
			"each setting's result and what to set: maxmemory, an allkeys-* eviction policy, proto-max-bulk-len " +
			"below 512mb, maxclients with an idle timeout, the default user off or password-protected, and " +
			"Sentinels that require a password. ACL users bound which keys a tenant reaches, not how much " +
			"memory or how many connections it takes. Exits non-zero when a setting is missing.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.NodeConfig()
			if err != nil {
				return err
			}
			if len(cfg.SentinelAddrs) == 0 && cfg.URL == "" {
				return errors.New("set --valkey-sentinel-addrs (or --valkey-url for a single node)")
			}
			nodes, err := acl.New(cfg)
			if err != nil {
				return err
			}
			defer nodes.Close()
			fs, readErr := nodes.Doctor(cmd.Context())
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tROLE\tSETTING\tRESULT\tHAVE\tWHAT TO SET")
			for _, f := range fs {
				result := "pass"
				if !f.OK {
					result = "FAIL"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Node, f.Role, f.Setting, result, f.Have, f.Fix)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if readErr != nil {
				return fmt.Errorf("some nodes could not be checked: %w", readErr)
			}
			if n := len(settings.Gaps(fs)); n > 0 {
				return fmt.Errorf("%d settings are missing for multi-tenant use (see WHAT TO SET)", n)
			}
			return nil
		},
	}
	all := pflag.NewFlagSet("tenant", pflag.ContinueOnError)
	o.BindFlags(all)
	for _, name := range doctorFlags {
		cmd.Flags().AddFlag(all.Lookup(name))
	}
	return cmd
}
