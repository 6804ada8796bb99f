// Command siteops is the siteops command line; installed as kubectl-siteops it is a kubectl plugin.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/siteops/siteops/internal/cli"
)

func main() {
	if err := cli.NewRootCommand().ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "siteops:", err)
		var exit interface{ ExitCode() int }
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		os.Exit(1)
	}
}
