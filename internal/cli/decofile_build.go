package cli

import "github.com/spf13/cobra"

func newDecofileBuildCommand() *cobra.Command {
	return pending("build", "Extract and encode a Decofile offline and print the ConfigMap it would become")
}
