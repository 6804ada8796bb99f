package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/siteops/siteops/test/cacheprobe/result"
)

// loop uses the cache every 200 ms until ctx ends, serving the counts at listen.
func loop(ctx context.Context, listen, addr, sentinels, master, other string) error {
	user, password := os.Getenv("LOADER_CACHE_REDIS_USERNAME"), os.Getenv("LOADER_CACHE_REDIS_PASSWORD")
	var c *redis.Client
	if sentinels != "" {
		c = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: master, SentinelAddrs: strings.Split(sentinels, ","),
			Username: user, Password: password, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1,
		})
	} else {
		c = redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	}
	defer c.Close()
	var mu sync.Mutex
	counts := result.Counts{User: user}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(counts)
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()

	var failingSince time.Time
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ownErr := roundTrip(rctx, c, user+":soak", strconv.Itoa(n))
		otherErr := c.Get(rctx, other).Err()
		cancel()
		now := time.Now()
		mu.Lock()
		if ownErr == nil {
			counts.OwnOK++
			if !failingSince.IsZero() {
				counts.LockoutMaxMillis = max(counts.LockoutMaxMillis, now.Sub(failingSince).Milliseconds())
				failingSince = time.Time{}
			}
		} else {
			counts.OwnFailed++
			counts.LastError = ownErr.Error()
			if failingSince.IsZero() {
				failingSince = now
			}
		}
		var re redis.Error
		switch {
		case otherErr == nil || errors.Is(otherErr, redis.Nil):
			counts.OtherRead++
		case errors.As(otherErr, &re) && strings.HasPrefix(re.Error(), "NOPERM"):
			counts.OtherRefused++
		}
		mu.Unlock()
	}
}

// roundTrip writes value to key and reads it back.
func roundTrip(ctx context.Context, c *redis.Client, key, value string) error {
	if err := c.Set(ctx, key, value, time.Minute).Err(); err != nil {
		return err
	}
	got, err := c.Get(ctx, key).Result()
	if err != nil {
		return err
	}
	if got != value {
		return fmt.Errorf("read %q back from %s, wrote %q", got, key, value)
	}
	return nil
}
