// Command cacheprobe is what a tenant's pod does with the Valkey credentials the injection
// webhook gives it: it authenticates with LOADER_CACHE_REDIS_USERNAME and
// LOADER_CACHE_REDIS_PASSWORD, writes and reads a key of its own, tries another tenant's key, and
// prints one line with each answer. The end-to-end test runs it as a pod (its image has no shell
// and no redis-cli) and reads the line from the pod's log. It then waits to be stopped, so a
// Deployment does not restart it. With --listen it goes on using the cache for as long as it
// runs (through the Sentinels with --sentinels) and serves its running counts there as JSON,
// which the soak reads.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/siteops/siteops/test/cacheprobe/result"
)

func main() {
	addr := flag.String("addr", "", "host:port of the Valkey server")
	other := flag.String("other-key", "", "a key of another tenant")
	listen := flag.String("listen", "", "host:port to serve the running counts on; the probe then keeps using the cache")
	sentinels := flag.String("sentinels", "", "comma-separated Sentinel host:port addresses, instead of --addr")
	master := flag.String("master", "mymaster", "the master's name on the Sentinels")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *listen != "" {
		if err := loop(ctx, *listen, *addr, *sentinels, *master, *other); err != nil {
			fmt.Fprintln(os.Stderr, "cacheprobe:", err)
			os.Exit(1)
		}
		return
	}
	r := run(*addr, *other)
	b, _ := json.Marshal(r)
	fmt.Println("cacheprobe " + string(b))
	<-ctx.Done()
}

func run(addr, other string) result.Result {
	r := result.Result{User: os.Getenv("LOADER_CACHE_REDIS_USERNAME")}
	c := redis.NewClient(&redis.Options{
		Addr: addr, Username: r.User, Password: os.Getenv("LOADER_CACHE_REDIS_PASSWORD"),
		DialTimeout: 3 * time.Second, MaxRetries: -1,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.Auth = answer(c.Ping(ctx).Err())
	own := r.User + ":probe"
	r.OwnWrite = answer(c.Set(ctx, own, "written by the tenant's pod", 0).Err())
	v, err := c.Get(ctx, own).Result()
	r.OwnRead = answer(err)
	if err == nil {
		r.OwnRead = v
	}
	r.OtherRead = answer(c.Get(ctx, other).Err())
	r.OtherWrite = answer(c.Set(ctx, other, "overwritten", 0).Err())
	anon := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 3 * time.Second, MaxRetries: -1})
	defer anon.Close()
	r.Anonymous = answer(anon.Get(ctx, other).Err())
	return r
}

// answer is "ok" or the server's error (its first word is the error code, e.g. NOPERM).
func answer(err error) string {
	var re redis.Error
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &re):
		return re.Error()
	default:
		return "error: " + err.Error()
	}
}
