package acl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// resp3Conn is a raw RESP3 connection: it sees the push messages a client library would hand to a
// callback, in the order the server sent them.
type resp3Conn struct {
	c net.Conn
	r *bufio.Reader
}

// push is a RESP3 out-of-band message such as ["invalidate", [keys...]].
type push []any

// respErr is a RESP3 error reply.
type respErr string

func (e respErr) Error() string { return string(e) }

func dialRESP3(t *testing.T, addr, user, pass string) *resp3Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	rc := &resp3Conn{c: c, r: bufio.NewReader(c)}
	if v, err := rc.do("hello", "3", "auth", user, pass); err != nil {
		t.Fatalf("HELLO 3 AUTH %s on %s: %v (%v)", user, addr, err, v)
	}
	return rc
}

func (rc *resp3Conn) send(args ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_ = rc.c.SetWriteDeadline(time.Now().Add(3 * time.Second))
	_, err := rc.c.Write([]byte(b.String()))
	return err
}

// do sends one command and returns its reply; pushes read before the reply are dropped.
func (rc *resp3Conn) do(args ...string) (any, error) {
	v, _, err := rc.doCollect(args...)
	return v, err
}

// doCollect sends one command and returns its reply and every push that arrived before it.
func (rc *resp3Conn) doCollect(args ...string) (any, []push, error) {
	if err := rc.send(args...); err != nil {
		return nil, nil, err
	}
	var pushes []push
	for {
		v, err := rc.read(time.Now().Add(5 * time.Second))
		if err != nil {
			return nil, pushes, err
		}
		if p, ok := v.(push); ok {
			pushes = append(pushes, p)
			continue
		}
		if e, ok := v.(respErr); ok {
			return nil, pushes, e
		}
		return v, pushes, nil
	}
}

func (rc *resp3Conn) read(deadline time.Time) (any, error) {
	_ = rc.c.SetReadDeadline(deadline)
	line, err := rc.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty RESP line")
	}
	body := line[1:]
	switch line[0] {
	case '+', ':', ',', '(', '#':
		return body, nil
	case '_':
		return nil, nil
	case '-', '!':
		if line[0] == '!' {
			s, err := rc.bulk(body)
			return respErr(s), err
		}
		return respErr(body), nil
	case '$', '=':
		if body == "-1" {
			return nil, nil
		}
		return rc.bulk(body)
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		items := make([]any, 0, max(n, 0))
		for range n {
			v, err := rc.read(deadline)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		if line[0] == '|' { // an attribute precedes the value it annotates
			return rc.read(deadline)
		}
		if line[0] == '>' {
			return push(items), nil
		}
		return items, nil
	}
	return nil, fmt.Errorf("unknown RESP3 type %q", line[0])
}

func (rc *resp3Conn) bulk(size string) (string, error) {
	n, err := strconv.Atoi(size)
	if err != nil {
		return "", err
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(rc.r, b); err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// invalidatedKeys returns the key names the invalidate pushes carry.
func invalidatedKeys(pushes []push) []string {
	var out []string
	for _, p := range pushes {
		if len(p) < 2 || p[0] != "invalidate" {
			continue
		}
		keys, _ := p[1].([]any)
		for _, k := range keys {
			if s, ok := k.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// TestTrackingIsRefusedOnEveryNode is the key-name leak through client-side caching: with
// CLIENT TRACKING in broadcast mode the server pushes the name of every key written, whatever the
// client's key patterns. Tenant A must be refused tracking on the master and on the replica, and
// must never be told a key of tenant B.
func TestTrackingIsRefusedOnEveryNode(t *testing.T) {
	set, ns := newSet(t, 1)
	ctx := context.Background()
	if err := ns.Upsert(ctx, []User{{Name: "loja", Password: "pa"}, {Name: "outra", Password: "pb"}}).Err(); err != nil {
		t.Fatal(err)
	}
	victim := redis.NewClient(&redis.Options{Addr: set.Master.Addr, Username: "outra", Password: "pb", MaxRetries: -1, Protocol: 2})
	defer victim.Close()
	for _, node := range []struct{ role, addr string }{{"master", set.Master.Addr}, {"replica", set.Replicas[0].Addr}} {
		for _, mode := range [][]string{
			{"client", "tracking", "on", "bcast"},
			{"client", "tracking", "on", "bcast", "prefix", "outra:"},
			{"client", "tracking", "on"},
		} {
			attacker := dialRESP3(t, node.addr, "loja", "pa")
			_, err := attacker.do(mode...)
			refused := err != nil && strings.HasPrefix(err.Error(), "NOPERM")
			if !refused {
				t.Errorf("%s: tenant loja ran %q: %v, want NOPERM", node.role, strings.Join(mode, " "), err)
			}
			// Tenant B writes a key; WAIT makes sure the replica has applied it too.
			key := fmt.Sprintf("outra:secret-%s-%d", node.role, time.Now().UnixNano())
			if err := victim.Set(ctx, key, "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := victim.Do(ctx, "wait", "1", "5000").Err(); err != nil {
				t.Fatalf("WAIT for the replica: %v", err)
			}
			// The server queues invalidations before it answers the next command, so every push
			// about the write comes before this PING's reply. On the replica, ask until the write
			// has been seen (the leak) or the attacker's own probe shows the replica applied it.
			leaked := collectLeak(t, attacker, victim, key, refused)
			for _, k := range leaked {
				if strings.HasPrefix(k, "outra:") {
					t.Errorf("%s: tenant loja, tracking with %q, was told tenant outra's key %q", node.role, strings.Join(mode, " "), k)
				}
			}
		}
	}
}

// collectLeak reads the pushes the attacker received up to its next PING replies. When tracking
// was granted it waits (bounded) for the invalidation of key, so the leak is shown rather than
// missed; when it was refused one PING after the replicated write suffices.
func collectLeak(t *testing.T, attacker *resp3Conn, victim *redis.Client, key string, refused bool) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var keys []string
	for {
		_, pushes, err := attacker.doCollect("ping")
		if err != nil {
			t.Fatalf("attacker PING: %v", err)
		}
		keys = append(keys, invalidatedKeys(pushes)...)
		if refused || time.Now().After(deadline) {
			return keys
		}
		for _, k := range keys {
			if k == key {
				return keys
			}
		}
		// Touch the key again so a replica that had not applied the first write gets another.
		if err := victim.Set(context.Background(), key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
