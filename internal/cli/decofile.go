package cli

import "github.com/spf13/cobra"

func newDecofileCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "decofile", Aliases: []string{"df"}, Short: "Build, inspect and follow Decofiles"}
	cmd.AddCommand(newDecofileBuildCommand(), newDecofileWaitCommand(), newDecofileReconcileCommand())
	return cmd
}
