package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// errNotBuilt is returned by commands whose part has not landed yet.
var errNotBuilt = errors.New("this command is not available in this build yet")

func pending(use, short string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, RunE: func(*cobra.Command, []string) error { return errNotBuilt }}
}
