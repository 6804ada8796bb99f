package cli

import "github.com/spf13/cobra"

func newDecofileWaitCommand() *cobra.Command {
	return pending("wait NAME", "Wait until a Decofile's content is confirmed by every pod")
}
