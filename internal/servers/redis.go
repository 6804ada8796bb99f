package servers

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configures a redis-server.
type RedisOptions struct {
	// Dir holds the server's config, data and log. Required.
	Dir string
	// Host to bind; default 127.0.0.1.
	Host string
	// Port to listen on; 0 picks a free one.
	Port int
	// ReplicaOf makes the server a replica of this host:port.
	ReplicaOf string
	// Password of the default user (requirepass and masterauth); empty means none.
	Password string
	// Config are extra redis.conf lines, such as the limits a node shared by tenants needs.
	Config []string
}

// StartRedis starts a redis-server without persistence and waits until it answers PING.
func StartRedis(ctx context.Context, o RedisOptions) (*Process, error) {
	bin, err := LookBinary("redis-server")
	if err != nil {
		return nil, err
	}
	if o.Host, o.Port, err = loopbackOr(o.Host, o.Port); err != nil {
		return nil, err
	}
	// redis-server resolves its dir from its own working folder, which is o.Dir itself.
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return nil, err
	}
	lines := []string{
		"bind " + o.Host,
		"port " + strconv.Itoa(o.Port),
		"save \"\"",
		"appendonly no",
		"protected-mode no",
		"daemonize no",
		"dir " + o.Dir,
		"loglevel notice",
		"repl-diskless-sync yes",
		"repl-diskless-sync-delay 0",
		// With an ACL file, CONFIG REWRITE (which Sentinel runs on every reconfiguration) does not
		// write every ACL user into redis.conf, which stalls a server holding thousands of users.
		"aclfile " + filepath.Join(o.Dir, "users.acl"),
	}
	if o.Password != "" {
		lines = append(lines, "masterauth "+o.Password)
	}
	lines = append(lines, o.Config...)
	if o.ReplicaOf != "" {
		host, port, err := net.SplitHostPort(o.ReplicaOf)
		if err != nil {
			return nil, fmt.Errorf("replicaOf %q: %w", o.ReplicaOf, err)
		}
		lines = append(lines, "replicaof "+host+" "+port)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create redis folder: %w", err)
	}
	// The ACL file, not requirepass, defines the default user once an aclfile is configured.
	defaultUser := "user default on nopass ~* &* +@all\n"
	if o.Password != "" {
		defaultUser = "user default on >" + o.Password + " ~* &* +@all\n"
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "users.acl"), []byte(defaultUser), 0o600); err != nil {
		return nil, fmt.Errorf("write ACL file: %w", err)
	}
	conf := filepath.Join(o.Dir, "redis.conf")
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("write redis config: %w", err)
	}
	addr := net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	p := newProcess("redis-"+strconv.Itoa(o.Port), addr, o.Dir, bin, conf)
	if err := p.start(ctx, 15*time.Second, func(ctx context.Context) error { return pingRedis(ctx, addr, o.Password) }); err != nil {
		return nil, err
	}
	return p, nil
}

func pingRedis(ctx context.Context, addr, password string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	return c.Ping(ctx).Err()
}

// SentinelSet is a Redis master, its replicas and the Sentinels watching them.
type SentinelSet struct {
	// MasterName is the name the Sentinels monitor the master under.
	MasterName string
	// Master is the server that was master at start.
	Master *Process
	// Replicas are the servers that were replicas at start.
	Replicas []*Process
	// Sentinels watch the master; a quorum of 2 promotes a replica.
	Sentinels []*Process
}

// SentinelAddrs lists the Sentinels' host:port addresses.
func (s *SentinelSet) SentinelAddrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, p := range s.Sentinels {
		out[i] = p.Addr
	}
	return out
}

// Stop ends every process of the set.
func (s *SentinelSet) Stop() {
	for _, p := range append(append(append([]*Process{}, s.Sentinels...), s.Replicas...), s.Master) {
		if p != nil {
			_ = p.Stop()
		}
	}
}

// SentinelSetOptions configures StartSentinelSet.
type SentinelSetOptions struct {
	// Dir holds every process's folder. Required.
	Dir string
	// Replicas is how many replicas to start; default 1.
	Replicas int
	// Sentinels is how many Sentinels to start; default 3.
	Sentinels int
	// MasterName defaults to mymaster.
	MasterName string
	// DownAfter is how long a node is unreachable before it is subjectively down; default 1s.
	DownAfter time.Duration
	// Password for the data nodes' default user, also given to the Sentinels.
	Password string
	// SentinelPassword, when set, is required from every Sentinel client (requirepass); the
	// Sentinels use it with each other too.
	SentinelPassword string
	// Host every server of the set binds and is announced at; default 127.0.0.1.
	Host string
	// NodeConfig are extra redis.conf lines for the master and every replica.
	NodeConfig []string
}

// StartSentinelSet starts a master, its replicas and Sentinels on o.Host, and waits until every
// Sentinel knows the master and the replicas are in sync.
func StartSentinelSet(ctx context.Context, o SentinelSetOptions) (*SentinelSet, error) {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Sentinels == 0 {
		o.Sentinels = 3
	}
	if o.MasterName == "" {
		o.MasterName = "mymaster"
	}
	if o.DownAfter == 0 {
		o.DownAfter = time.Second
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	set := &SentinelSet{MasterName: o.MasterName}
	fail := func(err error) (*SentinelSet, error) { set.Stop(); return nil, err }

	master, err := StartRedis(ctx, RedisOptions{Dir: filepath.Join(o.Dir, "master"), Host: o.Host, Password: o.Password, Config: o.NodeConfig})
	if err != nil {
		return fail(err)
	}
	set.Master = master
	for i := 0; i < o.Replicas; i++ {
		r, err := StartRedis(ctx, RedisOptions{Dir: filepath.Join(o.Dir, "replica-"+strconv.Itoa(i)), Host: o.Host, ReplicaOf: master.Addr, Password: o.Password, Config: o.NodeConfig})
		if err != nil {
			return fail(err)
		}
		set.Replicas = append(set.Replicas, r)
	}
	for _, r := range set.Replicas {
		if err := waitReplicaSynced(ctx, r.Addr, o.Password); err != nil {
			return fail(err)
		}
	}
	bin, err := LookBinary("redis-sentinel")
	if err != nil {
		return fail(err)
	}
	for i := 0; i < o.Sentinels; i++ {
		port, err := FreePort(o.Host)
		if err != nil {
			return fail(err)
		}
		dir, err := filepath.Abs(filepath.Join(o.Dir, "sentinel-"+strconv.Itoa(i)))
		if err != nil {
			return fail(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fail(err)
		}
		lines := []string{
			"bind " + o.Host,
			"port " + strconv.Itoa(port),
			"daemonize no",
			"protected-mode no",
			"dir " + dir,
			fmt.Sprintf("sentinel monitor %s %s %d 2", o.MasterName, master.Host(), master.Port()),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", o.MasterName, o.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s 10000", o.MasterName),
			fmt.Sprintf("sentinel parallel-syncs %s 1", o.MasterName),
		}
		if o.Password != "" {
			lines = append(lines, fmt.Sprintf("sentinel auth-pass %s %s", o.MasterName, o.Password))
		}
		if o.SentinelPassword != "" {
			lines = append(lines, "requirepass "+o.SentinelPassword)
		}
		conf := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			return fail(fmt.Errorf("write sentinel config: %w", err))
		}
		addr := net.JoinHostPort(o.Host, strconv.Itoa(port))
		p := newProcess("sentinel-"+strconv.Itoa(port), addr, dir, bin, conf)
		if err := p.start(ctx, 15*time.Second, func(ctx context.Context) error {
			return sentinelKnowsMaster(ctx, addr, o.SentinelPassword, o.MasterName, o.Replicas)
		}); err != nil {
			return fail(err)
		}
		set.Sentinels = append(set.Sentinels, p)
	}
	// Every Sentinel must see the others before a failover can reach quorum.
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range set.Sentinels {
		for {
			n, err := knownSentinels(ctx, s.Addr, o.SentinelPassword, o.MasterName)
			if err == nil && n >= o.Sentinels-1 {
				break
			}
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("sentinel %s sees %d other sentinels, want %d: %w", s.Addr, n, o.Sentinels-1, err))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return set, nil
}

func waitReplicaSynced(ctx context.Context, addr, password string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("replica %s did not sync with its master within 15s", addr)
}

func sentinelKnowsMaster(ctx context.Context, addr, password, master string, replicas int) error {
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1})
	defer c.Close()
	if _, err := c.GetMasterAddrByName(ctx, master).Result(); err != nil {
		return err
	}
	rs, err := c.Replicas(ctx, master).Result()
	if err != nil {
		return err
	}
	if len(rs) < replicas {
		return fmt.Errorf("sentinel knows %d replicas, want %d", len(rs), replicas)
	}
	return nil
}

func knownSentinels(ctx context.Context, addr, password, master string) (int, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: password})
	defer c.Close()
	s, err := c.Sentinels(ctx, master).Result()
	return len(s), err
}

// CommandCalls reads how many times each command has run on the Redis server at addr (INFO
// commandstats), leaving out info and ping: the reading itself and idle connections send them.
func CommandCalls(ctx context.Context, addr string) (map[string]int64, error) {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("read INFO commandstats from %s: %w", addr, err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "info" || name == "ping" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("commandstats line %q: %w", line, err)
		}
		out[name] = n
	}
	return out, nil
}

// CommandsSince returns, per command, the calls added between two CommandCalls readings.
func CommandsSince(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for name, n := range after {
		if n > before[name] {
			d[name] = n - before[name]
		}
	}
	return d
}
