package cli

import "github.com/spf13/cobra"

func newSiteCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "site", Short: "Run the reference site runtime"}
	cmd.AddCommand(pending("serve", "Serve a Decofile like a Deco site pod does"))
	return cmd
}
