package acl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/siteops/siteops/internal/tenant/settings"
)

// ReadSettings reads, over the admin connection, what settings.CheckDataNode judges on node: the
// CONFIG GET parameters and the default user, in one round trip.
func (n *NodeSet) ReadSettings(ctx context.Context, node Node) (settings.DataNode, error) {
	out := settings.DataNode{Addr: node.Addr, Role: string(node.Role), Config: map[string]string{}}
	cmds := [][]any{{"acl", "getuser", "default"}}
	for _, p := range settings.ConfigParams {
		cmds = append(cmds, []any{"config", "get", p})
	}
	res, err := n.pipeline(ctx, node, cmds)
	if err != nil {
		return out, err
	}
	for i, c := range res[1:] {
		if err := c.Err(); err != nil {
			return out, fmt.Errorf("config get %s (the admin user needs CONFIG GET): %w", settings.ConfigParams[i], err)
		}
		kv, err := c.StringSlice()
		if err != nil {
			return out, fmt.Errorf("config get %s: %w", settings.ConfigParams[i], err)
		}
		for j := 0; j+1 < len(kv); j += 2 {
			out.Config[kv[j]] = kv[j+1]
		}
	}
	switch err := res[0].Err(); {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return out, fmt.Errorf("acl getuser default (the admin user needs ACL GETUSER): %w", err)
	default:
		out.Default = userOf(res[0])
	}
	return out, nil
}

// userOf reads the flags and password count of an ACL GETUSER reply (RESP2: a flat list).
func userOf(c *redis.Cmd) settings.User {
	u := settings.User{Exists: true}
	fields, _ := c.Val().([]any)
	for i := 0; i+1 < len(fields); i += 2 {
		list, _ := fields[i+1].([]any)
		switch k, _ := fields[i].(string); k {
		case "flags":
			for _, f := range list {
				if s, ok := f.(string); ok {
					u.Flags = append(u.Flags, s)
				}
			}
		case "passwords":
			u.Passwords = len(list)
		}
	}
	return u
}

// SentinelOpen reports whether the Sentinel at addr answers PING on a connection that sends no
// credentials. A refusal that is not about authentication is an error: the answer is unknown.
func (n *NodeSet) SentinelOpen(ctx context.Context, addr string) (bool, error) {
	c := redis.NewClient(&redis.Options{
		Addr: addr, TLSConfig: n.cfg.TLS, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		DialTimeout: n.cfg.Timeout, ReadTimeout: n.cfg.Timeout, WriteTimeout: n.cfg.Timeout,
	})
	defer c.Close()
	err := c.Ping(ctx).Err()
	switch {
	case err == nil:
		return true, nil
	case strings.HasPrefix(err.Error(), "NOAUTH"), strings.HasPrefix(err.Error(), "WRONGPASS"), strings.HasPrefix(err.Error(), "NOPERM"):
		return false, nil
	}
	return false, fmt.Errorf("ping sentinel %s without credentials: %w", addr, err)
}

// Doctor checks the settings multi-tenant use needs on every node the Sentinels report (or the
// --valkey-url node) and on every Sentinel. A node that could not be read is in the error, and
// the findings of the others are still returned.
func (n *NodeSet) Doctor(ctx context.Context) ([]settings.Finding, error) {
	nodes, err := n.Discover(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []settings.Finding
	var errs []error
	for _, node := range nodes {
		v, err := n.ReadSettings(ctx, node)
		if err != nil {
			errs = append(errs, &NodeError{Node: node, Err: err})
			continue
		}
		out = append(out, settings.CheckDataNode(v)...)
	}
	for _, addr := range n.cfg.SentinelAddrs {
		open, err := n.SentinelOpen(ctx, addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, settings.CheckSentinel(settings.Sentinel{Addr: addr, Open: open}))
	}
	return out, errors.Join(errs...)
}
