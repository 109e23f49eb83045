package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Account leases: each account is driven by at most one replica at a time.
// Redis is the only judge of who holds what: a lease is one key with a PX
// expiry that the server enforces, so replicas' wall clocks never decide
// ownership. A replica, in turn, never trusts a lease longer than its own
// monotonic clock allows (see Lease).
//
// Unlike affinity and responses, lease calls never degrade to a local tier:
// when Redis cannot be reached they fail, so a replica that cannot reach Redis
// never believes it holds anything new.
//
// Data loss. Leases and tokens live only as long as Redis keeps its data. A
// server that restarts empty (no persistence, FLUSHALL, eviction) forgets who
// held what while those holders still serve until their own deadlines. To
// keep two owners apart across that, the store keeps an epoch key without
// expiry; the first lease call that finds it missing starts a quarantine of
// one TTL during which no new owner is admitted (AcquireLease answers
// ok=false with an empty Holder), while the previous holders re-establish
// their leases through RenewLease with the token they already have. The
// token counter is raised to the re-established token, so it does not go back
// for those accounts; an account whose holder did not come back in time
// restarts its tokens from 1, which is safe because that holder's own deadline
// has passed by the end of the quarantine. The quarantine also applies to
// the very first start of a cluster: new owners wait one TTL after the first
// lease call, which gives every replica time to register before the spread.
//
// Failover. With Sentinel or a Redis Cluster a replica can be promoted
// without the newest writes (replication is asynchronous). An acquire or
// renew therefore counts only once a replica of the primary acknowledged it
// (runDurable, WAIT): the promoted replica holds every lease a replica serves
// under, with an expiry no earlier than its holder's deadline. The argument
// and its limits are in docs/cluster.md.
//
// Redis must run with maxmemory-policy noeviction: evicting a live lease or the
// epoch key would let two replicas hold one account.

// ErrLeaseLost is returned by RenewLease when the lease is no longer the
// caller's: it expired, was released, or another holder or token holds it.
var ErrLeaseLost = errors.New("lease lost")

// ErrNotHolder: this replica does not hold the account's lease, so it may
// not start, restart or change the account's worker.
var ErrNotHolder = errors.New("this replica does not hold the account's lease")

// Lease is one account's ownership record.
//
// For a lease the caller itself holds (AcquireLease with ok=true,
// RenewLease), Expires is callStart + ttl, where callStart is time.Now() read
// before the request was sent; it keeps Go's monotonic clock reading, so
// time.Until(l.Expires) and time.Now().Before(l.Expires) are immune to wall
// clock jumps on the replica (do not Round(0) it, or compare it across
// processes). Redis set the key's expiry when the script ran, which is no
// earlier than callStart, so no other holder can take the lease before
// Expires, provided Redis keeps its data (or the quarantine above covers the
// loss) and its clock does not run ahead of the replica's by more than the
// caller's margin.
//
// The self-fencing rule for a holder:
//   - stop serving the account (no new turns; cancel in-flight ones; stop or
//     detach the worker) by Expires - margin on the monotonic clock, where
//     margin covers clock-rate drift and how long stopping takes (for example
//     max(1s, ttl/5));
//   - move the deadline only on a successful AcquireLease/RenewLease, to the
//     Expires that call returned; an error (timeout, Redis down) leaves the
//     old deadline in force, even though the renewal may have landed;
//   - renew with RenewLease (only it re-establishes a lease Redis forgot in a
//     data loss) well before the deadline (every ttl/3 leaves room for two
//     failed attempts), and never call it once the deadline has passed:
//     treat the lease as lost and go through AcquireLease again;
//   - release only after it stopped serving (drain, then ReleaseLease);
//   - use a holder id unique to the process incarnation (replica id plus a
//     random boot nonce), so a restarted replica cannot renew the lease its
//     predecessor may still be serving under.
//
// For a lease held by someone else (AcquireLease with ok=false, Leases),
// Expires is when the caller received the reply plus the time Redis said the
// lease had left: an upper bound on when it can become free, for display and
// for scheduling the next attempt.
type Lease struct {
	Account string    `json:"account"`
	Holder  string    `json:"holder"`
	Token   int64     `json:"token"`
	Expires time.Time `json:"expires"`
}

// Key families of leases. The lease table (leases, tokens, the epoch) and the
// replica registry share the hash tag {cluster}, so that in a Redis Cluster
// they live in one slot and every script sees all of them.
func (r *RedisStore) tableKey(name string) string { return r.cfg.Prefix + "{cluster}:" + name }

func (r *RedisStore) leaseKey(account string) string { return r.tableKey("lease:" + account) }

// leaseTokenKey is the account's fencing counter; it never expires.
func (r *RedisStore) leaseTokenKey(account string) string { return r.tableKey("leasetok:" + account) }

// leaseEpochKey holds, without expiry, the server time (Unix ms) at which the
// quarantine that followed its creation ends; its absence means Redis lost
// its data (or never had any).
func (r *RedisStore) leaseEpochKey() string { return r.tableKey("leaseepoch") }

// leaseEpochLua sets qend to the end of the current quarantine, starting one
// of ttl ms when the epoch key is missing. It needs now and ttl, and the
// epoch key as KEYS[3].
const leaseEpochLua = `local qend = redis.call('GET', KEYS[3])
if qend then
  qend = tonumber(qend)
else
  qend = now + ttl
  redis.call('SET', KEYS[3], string.format('%d', qend))
end
`

// allowOOM lets a script run, and write, when Redis is out of memory
// (maxmemory with noeviction): leases and heartbeats are a few bytes each,
// and a replica that cannot renew must stop its accounts, so a Redis filled
// by other data must not fence every replica. It needs Redis 7.
const allowOOM = "#!lua flags=allow-oom\n"

// A lease value is "<token>:<holder>"; the token is digits, so the first colon
// splits it even when the holder has colons of its own.

// acquireLeaseScript takes a free lease for a new owner with the next token,
// renews it when the holder already holds it, and otherwise reports the
// current holder. It returns {status, holder, token, ms}: status 1 held by
// ARGV[1] (ms = ttl), 0 held by another (ms = its PTTL), 2 free but in
// quarantine (ms = quarantine left).
//
// KEYS[1] lease, KEYS[2] token counter, KEYS[3] epoch; ARGV[1] holder,
// ARGV[2] ttl ms.
var acquireLeaseScript = redis.NewScript(allowOOM + redisNowMs + `
local holder, ttl = ARGV[1], tonumber(ARGV[2])
` + leaseEpochLua + `
local v = redis.call('GET', KEYS[1])
if v then
  local tok, h = string.match(v, '^(%d+):(.*)$')
  if h == holder then
    redis.call('PEXPIRE', KEYS[1], ttl)
    return {1, h, tonumber(tok), ttl}
  end
  return {0, h or '', tonumber(tok) or 0, redis.call('PTTL', KEYS[1])}
end
if now < qend then
  return {2, '', 0, qend - now}
end
local tok = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], tok .. ':' .. holder, 'PX', ttl)
return {1, holder, tok, ttl}
`)

// renewLeaseScript extends a lease still held by ARGV[1] with token ARGV[2].
// A lease that is gone is re-established only during a quarantine (Redis
// lost its data while the caller held it), and only if no higher token was
// issued since; the counter is raised to the token. It returns 1, or nil when
// the lease is lost.
//
// KEYS[1] lease, KEYS[2] token counter, KEYS[3] epoch; ARGV[1] holder,
// ARGV[2] token, ARGV[3] ttl ms.
var renewLeaseScript = redis.NewScript(allowOOM + redisNowMs + `
local holder, token, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local want = token .. ':' .. holder
local v = redis.call('GET', KEYS[1])
if v then
  if v ~= want then return false end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return 1
end
` + leaseEpochLua + `
if now >= qend then return false end
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if cur > tonumber(token) then return false end
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[1], want, 'PX', ttl)
return 1
`)

// releaseLeaseScript deletes the lease if ARGV[1] still holds it with token
// ARGV[2]. The token counter stays.
//
// KEYS[1] lease; ARGV[1] holder, ARGV[2] token.
var releaseLeaseScript = redis.NewScript(allowOOM + `
if redis.call('GET', KEYS[1]) == ARGV[2] .. ':' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// leasesScript reads several leases at one instant: for each key {value,
// PTTL}, or nil when free.
//
// KEYS[1..n] leases.
var leasesScript = redis.NewScript(`
local out = {}
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v then
    out[i] = {v, redis.call('PTTL', KEYS[i])}
  else
    out[i] = false
  end
end
return out
`)

func checkLeaseArgs(account, holder string, ttl time.Duration) error {
	switch {
	case account == "":
		return errors.New("empty account")
	case holder == "":
		return errors.New("empty holder")
	case ttl < time.Millisecond:
		return fmt.Errorf("lease ttl %v under 1ms", ttl)
	}
	return nil
}

// AcquireLease takes account's lease for holder for ttl. A free lease (or one
// whose holder let it expire) goes to holder with the next fencing token: one
// more than any token the account ever had, also across expiry and release.
// If holder already holds it, it is renewed and keeps its token. If another
// holder's lease is live, or Redis is in its quarantine after losing its data,
// ok is false and the returned Lease is the current one (empty Holder during
// the quarantine, with Expires at its end). Any Redis failure, and a write
// that no replica acknowledged in time when the primary has replicas
// (ErrNotReplicated), is returned as an error within RedisConfig.Timeout;
// the caller must then assume nothing.
func (r *RedisStore) AcquireLease(ctx context.Context, account, holder string, ttl time.Duration) (Lease, bool, error) {
	if err := checkLeaseArgs(account, holder, ttl); err != nil {
		return Lease{}, false, fmt.Errorf("acquire lease %s: %w", account, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	start := time.Now() // before the request: Expires must not overstate
	res, err := r.runDurable(ctx, acquireLeaseScript,
		[]string{r.leaseKey(account), r.leaseTokenKey(account), r.leaseEpochKey()},
		holder, ttl.Milliseconds()).Slice()
	if err != nil {
		return Lease{}, false, fmt.Errorf("acquire lease %s: %w", account, err)
	}
	end := time.Now()
	if len(res) != 4 {
		return Lease{}, false, fmt.Errorf("acquire lease %s: unexpected reply %v", account, res)
	}
	status, _ := res[0].(int64)
	h, _ := res[1].(string)
	tok, _ := res[2].(int64)
	ms, _ := res[3].(int64)
	l := Lease{Account: account, Holder: h, Token: tok}
	if status == 1 {
		l.Expires = start.Add(ttl)
		return l, true, nil
	}
	l.Expires = end.Add(time.Duration(ms) * time.Millisecond)
	return l, false, nil
}

// RenewLease extends holder's lease on account by ttl if holder still holds it
// with token, and returns it with Expires = callStart + ttl. Otherwise it
// returns ErrLeaseLost. Any Redis failure, and a renewal no replica
// acknowledged (ErrNotReplicated), is returned as another error within
// RedisConfig.Timeout; the renewal may or may not have landed, so the caller
// keeps its previous deadline.
func (r *RedisStore) RenewLease(ctx context.Context, account, holder string, token int64, ttl time.Duration) (Lease, error) {
	if err := checkLeaseArgs(account, holder, ttl); err != nil {
		return Lease{}, fmt.Errorf("renew lease %s: %w", account, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	start := time.Now()
	err := r.runDurable(ctx, renewLeaseScript,
		[]string{r.leaseKey(account), r.leaseTokenKey(account), r.leaseEpochKey()},
		holder, token, ttl.Milliseconds()).Err()
	if errors.Is(err, redis.Nil) {
		return Lease{}, ErrLeaseLost
	}
	if err != nil {
		return Lease{}, fmt.Errorf("renew lease %s: %w", account, err)
	}
	return Lease{Account: account, Holder: holder, Token: token, Expires: start.Add(ttl)}, nil
}

// ReleaseLease gives account's lease up if holder still holds it with token,
// so another replica can take it at once. Releasing a lease that is no longer
// the caller's does nothing and is not an error; a Redis failure is.
func (r *RedisStore) ReleaseLease(ctx context.Context, account, holder string, token int64) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	err := releaseLeaseScript.Run(ctx, r.client, []string{r.leaseKey(account)}, holder, token).Err()
	if err != nil {
		return fmt.Errorf("release lease %s: %w", account, err)
	}
	return nil
}

// Leases returns the current lease of each account, in the order given, read
// in one round trip; a free account's entry is the zero Lease.
func (r *RedisStore) Leases(ctx context.Context, accounts []string) ([]Lease, error) {
	if len(accounts) == 0 {
		return nil, nil
	}
	keys := make([]string, len(accounts))
	for i, a := range accounts {
		keys[i] = r.leaseKey(a)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	res, err := leasesScript.Run(ctx, r.client, keys).Slice()
	if err != nil {
		return nil, fmt.Errorf("read leases: %w", err)
	}
	at := time.Now()
	if len(res) != len(accounts) {
		return nil, fmt.Errorf("read leases: %d replies for %d accounts", len(res), len(accounts))
	}
	out := make([]Lease, len(accounts))
	for i, v := range res {
		pair, ok := v.([]any)
		if !ok || len(pair) != 2 {
			continue // free
		}
		val, _ := pair[0].(string)
		pttl, _ := pair[1].(int64)
		l, err := decodeLease(accounts[i], val)
		if err != nil {
			return nil, fmt.Errorf("read leases: %w", err)
		}
		l.Expires = at.Add(time.Duration(max(pttl, 0)) * time.Millisecond)
		out[i] = l
	}
	return out, nil
}

// decodeLease parses a lease value "<token>:<holder>".
func decodeLease(account, v string) (Lease, error) {
	tok, holder, ok := strings.Cut(v, ":")
	n, err := strconv.ParseInt(tok, 10, 64)
	if !ok || err != nil {
		return Lease{}, fmt.Errorf("lease %s: bad value %q", account, v)
	}
	return Lease{Account: account, Holder: holder, Token: n}, nil
}
