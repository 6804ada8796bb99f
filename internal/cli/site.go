package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/pkg/siteruntime"
)

func newSiteCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "site", Short: "Run the reference site runtime"}
	cmd.AddCommand(newSiteServeCommand())
	return cmd
}

func newSiteServeCommand() *cobra.Command {
	addr := "127.0.0.1:8000"
	o := siteruntime.OptionsFromEnv()
	authorities := ""
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a Decofile like a Deco site pod does",
		Long: "Loads DECO_RELEASE (file://….json, file://….bin, or https:// from a host in\n" +
			"DECO_ALLOWED_AUTHORITIES) and serves the reload protocol: POST /.decofile/reload (token from\n" +
			"DECO_RELEASE_RELOAD_TOKEN), GET /.decofile/reload?timestamp=&tsFile= (long-poll), and\n" +
			"GET /.decofile (timestamp and content hash; ?content=true for the JSON).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if authorities != "" {
				o.AllowedAuthorities = siteruntime.ParseAuthorities(authorities)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rt, err := siteruntime.New(ctx, o)
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", addr, err)
			}
			srv := &http.Server{Handler: rt.Handler(), ReadHeaderTimeout: 10 * time.Second}
			snap := rt.Current()
			fmt.Fprintf(cmd.OutOrStdout(), "site runtime serving on http://%s (timestamp %d, content %.12s, reload %s)\n",
				l.Addr(), snap.Timestamp, snap.Hash, map[bool]string{true: "enabled", false: "disabled: no token"}[o.Token != ""])
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(l) }()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", addr, "address to listen on")
	f.StringVar(&o.Release, "release", o.Release, "where to load the Decofile from (default $"+decov1alpha1.EnvRelease+")")
	f.StringVar(&o.Token, "token", o.Token, "reload token (default $"+decov1alpha1.EnvReloadToken+"); empty disables reloads")
	f.StringVar(&authorities, "allowed-authorities", "", "hosts an https release may come from (default $"+decov1alpha1.EnvAllowedAuthorities+" or the runtime defaults)")
	f.DurationVar(&o.PollInterval, "poll-interval", siteruntime.DefaultPollInterval, "long-poll: how often timestamp.txt is read")
	f.DurationVar(&o.PollTimeout, "poll-timeout", siteruntime.DefaultPollTimeout, "long-poll: how long a request waits")
	return cmd
}
