package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// haReadyTimeout bounds how long a Sentinel set or a Cluster may take to
// settle after its servers answer PING (replication synced, sentinels know
// each other, every slot served). Generous: a loaded 2-core machine is slow.
const haReadyTimeout = 60 * time.Second

// RedisTarget is a Redis deployment a store can be opened on: one server, a
// Sentinel set or a Cluster.
type RedisTarget interface {
	// Mode is redis_mode for it ("single", "sentinel", "cluster").
	Mode() string
	// URL is redis_url for it, in Mode's form.
	URL() string
	// Universal returns a client of it, closed when the test ends.
	Universal(t testing.TB) redis.UniversalClient
}

var (
	_ RedisTarget = (*RedisServer)(nil)
	_ RedisTarget = (*RedisSentinelSet)(nil)
	_ RedisTarget = (*RedisClusterSet)(nil)
)

// Mode implements RedisTarget: one server.
func (s *RedisServer) Mode() string { return "single" }

// Universal implements RedisTarget.
func (s *RedisServer) Universal(t testing.TB) redis.UniversalClient { return s.Client(t) }

// SentinelMaster is the name the sentinels of a RedisSentinelSet monitor
// the primary under.
const SentinelMaster = "pgmaster"

// RedisSentinelSet is a primary, one replica and three sentinels on
// loopback, as Redis ships Sentinel, owned by one test.
type RedisSentinelSet struct {
	// Primary and Replica are the data servers as started; after a
	// failover Replica is the primary.
	Primary, Replica *RedisServer
	// Sentinels are the three sentinels (quorum 2).
	Sentinels []*RedisServer
	// DownAfter is the sentinels' down-after-milliseconds.
	DownAfter time.Duration

	lock *RedisLock // nil: open
}

// RedisSentinel starts a Sentinel set whose sentinels call the primary down
// after downAfter without an answer, and waits until the replica is in sync
// and every sentinel knows the replica and the other two sentinels.
func RedisSentinel(t testing.TB, downAfter time.Duration) *RedisSentinelSet {
	t.Helper()
	return RedisSentinelLocked(t, downAfter, nil)
}

// RedisSentinelLocked is RedisSentinel with every server, sentinels
// included, locked with l (nil: open).
func RedisSentinelLocked(t testing.TB, downAfter time.Duration, l *RedisLock) *RedisSentinelSet {
	t.Helper()
	set := &RedisSentinelSet{DownAfter: downAfter, lock: l}
	set.Primary = startRedis(t, "", nil, l)
	set.Replica = startRedis(t, "", []string{"--replicaof", "127.0.0.1", strconv.Itoa(set.Primary.Port())}, l)
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
		"sentinel down-after-milliseconds %[1]s %[3]d\n"+
		"sentinel failover-timeout %[1]s %[4]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		SentinelMaster, set.Primary.Port(), downAfter.Milliseconds(), max(3*downAfter, 3*time.Second).Milliseconds())
	if l != nil {
		conf += fmt.Sprintf("sentinel auth-pass %s %s\nsentinel sentinel-pass %s\n", SentinelMaster, l.Password, l.Password)
	}
	for range 3 {
		set.Sentinels = append(set.Sentinels, startRedis(t, conf, []string{"--sentinel"}, l))
	}
	ctx := context.Background()
	replica := set.Replica.Client(t)
	sentinels := make([]*redis.SentinelClient, len(set.Sentinels))
	for i, s := range set.Sentinels {
		sentinels[i] = sentinelClient(t, s)
	}
	WaitForNoError(t, haReadyTimeout, "the Sentinel set to settle", func() error {
		info, err := replica.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica not in sync: %s", info)
		}
		for i, s := range sentinels {
			m, err := s.Master(ctx, SentinelMaster).Result()
			if err != nil {
				return err
			}
			if m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return fmt.Errorf("sentinel %s sees %s replicas and %s other sentinels", set.Sentinels[i].Addr(), m["num-slaves"], m["num-other-sentinels"])
			}
		}
		return nil
	})
	return set
}

func sentinelClient(t testing.TB, s *RedisServer) *redis.SentinelClient {
	t.Helper()
	o := &redis.Options{Addr: s.Addr()}
	if s.lock != nil {
		o.Password, o.TLSConfig = s.lock.Password, s.lock.TLSConfig()
	}
	c := redis.NewSentinelClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Mode implements RedisTarget.
func (set *RedisSentinelSet) Mode() string { return "sentinel" }

// URL implements RedisTarget: redis.ParseFailoverURL's form.
// A locked set's is rediss:// with the password twice: as its user info
// for the sentinels, and as its password parameter for the data servers.
func (set *RedisSentinelSet) URL() string {
	u := "redis://" + set.Sentinels[0].Addr() + "/0?master_name=" + SentinelMaster
	if set.lock != nil {
		u = "rediss://" + userinfo(set.lock.Password) + set.Sentinels[0].Addr() + "/0?master_name=" +
			SentinelMaster + "&password=" + url.QueryEscape(set.lock.Password)
	}
	for _, s := range set.Sentinels[1:] {
		u += "&addr=" + s.Addr()
	}
	return u
}

// Universal implements RedisTarget.
func (set *RedisSentinelSet) Universal(t testing.TB) redis.UniversalClient {
	t.Helper()
	addrs := make([]string, len(set.Sentinels))
	for i, s := range set.Sentinels {
		addrs[i] = s.Addr()
	}
	o := &redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: addrs}
	if set.lock != nil {
		o.SentinelPassword, o.Password, o.TLSConfig = set.lock.Password, set.lock.Password, set.lock.TLSConfig()
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// PrimaryAddr asks the first live sentinel where the primary is now.
func (set *RedisSentinelSet) PrimaryAddr(t testing.TB) (string, error) {
	t.Helper()
	var err error
	for _, s := range set.Sentinels {
		var a []string
		a, err = sentinelClient(t, s).GetMasterAddrByName(context.Background(), SentinelMaster).Result()
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1]), nil
		}
	}
	return "", err
}

// RedisClusterSet is a Redis Cluster of real servers on loopback, owned by
// one test.
type RedisClusterSet struct {
	// Nodes are every server, primaries first as created (a replica's
	// role can change with a failover).
	Nodes []*RedisServer

	lock *RedisLock // nil: open
}

// RedisCluster starts primaries servers with cluster mode on, and
// replicasEach replicas for each, joins them with redis-cli --cluster
// create, and waits until every node reports cluster_state:ok and every
// replica is in sync. nodeTimeout is cluster-node-timeout: how long a
// primary may be silent before its replica is promoted.
func RedisCluster(t testing.TB, primaries, replicasEach int, nodeTimeout time.Duration) *RedisClusterSet {
	t.Helper()
	return RedisClusterLocked(t, primaries, replicasEach, nodeTimeout, nil)
}

// RedisClusterLocked is RedisCluster with every node locked with l (nil:
// open): l.Password, TLS for clients and the cluster bus.
func RedisClusterLocked(t testing.TB, primaries, replicasEach int, nodeTimeout time.Duration, l *RedisLock) *RedisClusterSet {
	t.Helper()
	cli := redisBin(t, "redis-cli")
	set := &RedisClusterSet{lock: l}
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
		// Serve the slots that still have a primary while another's are down.
		"--cluster-require-full-coverage", "no"}
	n := primaries * (1 + replicasEach)
	addrs := make([]string, n)
	for i := range n {
		s := startRedis(t, "", args, l)
		set.Nodes = append(set.Nodes, s)
		addrs[i] = s.Addr()
	}
	create := append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", strconv.Itoa(replicasEach), "--cluster-yes")
	if l != nil {
		create = append(create, "--tls", "--cacert", l.CAFile)
	}
	cmd := exec.Command(cli, create...)
	if l != nil {
		cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+l.Password)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, tail(string(out), 3000))
	}
	ctx := context.Background()
	clients := make([]*redis.Client, n)
	for i, s := range set.Nodes {
		clients[i] = s.Client(t)
	}
	WaitForNoError(t, haReadyTimeout, "the Redis Cluster to settle", func() error {
		for i, c := range clients {
			s := set.Nodes[i]
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				return fmt.Errorf("node %s: %s", s.Addr(), info)
			}
			repl, err := c.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("replica %s not in sync", s.Addr())
			}
		}
		return nil
	})
	return set
}

// Mode implements RedisTarget.
func (set *RedisClusterSet) Mode() string { return "cluster" }

// URL implements RedisTarget: redis.ParseClusterURL's form, every node a
// seed.
// A locked cluster's is rediss:// with the password.
func (set *RedisClusterSet) URL() string {
	u := "redis://" + set.Nodes[0].Addr()
	if set.lock != nil {
		u = "rediss://" + userinfo(set.lock.Password) + set.Nodes[0].Addr()
	}
	for i, s := range set.Nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + s.Addr()
	}
	return u
}

// Universal implements RedisTarget.
func (set *RedisClusterSet) Universal(t testing.TB) redis.UniversalClient {
	t.Helper()
	addrs := make([]string, len(set.Nodes))
	for i, s := range set.Nodes {
		addrs[i] = s.Addr()
	}
	o := &redis.ClusterOptions{Addrs: addrs}
	if set.lock != nil {
		o.Password, o.TLSConfig = set.lock.Password, set.lock.TLSConfig()
	}
	c := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// PrimaryOf returns the node that serves key's slot now.
func (set *RedisClusterSet) PrimaryOf(t testing.TB, key string) *RedisServer {
	t.Helper()
	ctx := context.Background()
	slot, err := set.Nodes[0].Client(t).ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
	}
	for _, s := range set.Nodes {
		shards, err := s.Client(t).ClusterShards(ctx).Result()
		if err != nil {
			continue // a node that is down
		}
		for _, sh := range shards {
			if !slices.ContainsFunc(sh.Slots, func(r redis.SlotRange) bool { return r.Start <= slot && slot <= r.End }) {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role != "master" || n.Health != "online" {
					continue
				}
				for _, node := range set.Nodes {
					if node.Port() == int(n.Port) || node.Port() == int(n.TLSPort) {
						return node
					}
				}
			}
		}
	}
	t.Fatalf("no node serves the slot of %s", key)
	return nil
}

// StoreTargets are the deployments every Redis store's suite runs on: one
// server, and a three-primary cluster (whose scripts must keep their keys in
// one slot). Each starts its own servers for the test that asks.
func StoreTargets() map[string]func(t *testing.T) RedisTarget {
	return map[string]func(t *testing.T) RedisTarget{
		"redis":   func(t *testing.T) RedisTarget { return Redis(t) },
		"cluster": func(t *testing.T) RedisTarget { return RedisCluster(t, 3, 0, 5*time.Second) },
	}
}
