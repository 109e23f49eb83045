package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// plan sizes a run: -short is what `make bench` runs in under two minutes,
// the full plan what `make bench-full` runs.
type plan struct {
	short bool
	// rounds splits each measurement into blocks that alternate direct and
	// through poolgate, so drift on a shared machine hits both alike.
	rounds int
	// seqN and seqStreamN are the requests per target at concurrency 1.
	seqN, seqStreamN int
	// block is the time per target of each closed-loop or constant-rate
	// measurement (split across rounds); sweepBlock the same for the sweep.
	block, sweepBlock time.Duration
	// clients is the closed-loop concurrency of scenarios 2 and 3.
	clients int
	// sweep lists the extra concurrencies of the added-latency plot (1 and
	// clients come from scenarios 1 and 2).
	sweep []int
	// streams are scenario 4's numbers of concurrent slow streams, each of
	// streamChunks chunks 500 ms apart, opened at streamRamp per second.
	streams      []int
	streamChunks int
	streamRamp   float64
	// affinityClients is scenario 5's closed-loop concurrency.
	affinityClients int
	// profile is the length of the extra block through the gateway that
	// each row profiles (0: none).
	profile time.Duration
}

func newPlan(short bool) plan {
	if short {
		return plan{short: true, rounds: 3, seqN: 2400, seqStreamN: 300, block: 3 * time.Second,
			sweepBlock: 2 * time.Second, clients: 50, sweep: []int{8},
			streams: []int{1000}, streamChunks: 12, streamRamp: 1000, affinityClients: 16, profile: 2 * time.Second}
	}
	return plan{rounds: 5, seqN: 15000, seqStreamN: 2000, block: 15 * time.Second,
		sweepBlock: 6 * time.Second, clients: 50, sweep: []int{8, 32, 128, 200},
		streams: []int{1000, 5000}, streamChunks: 12, streamRamp: 1000, affinityClients: 16, profile: 3 * time.Second}
}

// row is one scenario measured directly and through poolgate.
type row struct {
	id, title, mode string
	// concurrency places non-streaming closed-loop rows on the plot (0: not plotted).
	concurrency     int
	direct, through *recorder
	// cpu is the gateway's CPU time over the through blocks.
	cpu time.Duration
	// idle and mem are the gateway's memory when ready and after the row.
	idle, mem memInfo
	note      string
	// workerDirect and workerThrough are the worker's CPU over the direct
	// and the through blocks: the floor the gateway adds to.
	workerDirect, workerThrough time.Duration
	// mallocs and allocBytes are what the gateway allocated over the
	// through blocks.
	mallocs, allocBytes uint64
	// flat and cum are the top entries of the gateway's CPU profile, kinds
	// its own time by kind of work.
	flat, cum []topEntry
	kinds     []breakdown
	// extra counts the requests through the gateway outside the measured
	// blocks (warm-up, profiling).
	extra int64
	// noDirect marks a row whose worker can't be asked directly (it speaks
	// Lingma's protocol, not HTTP): only the way through is measured.
	noDirect bool
	// key is the API key sent through the gateway ("" = none).
	key string
	// rounds are the row's rounds, pending the one under way: the figures
	// the targets check are medians over rounds, each comparing blocks that
	// ran side by side.
	rounds  []round
	pending round
}

// load is how requests are driven: a closed loop of clients, or a constant
// rate with an in-flight cap. n bounds the count, dur the time.
type load struct {
	clients int
	rate    float64
	n       int
	dur     time.Duration
}

const unbounded = 1 << 30

// bench runs the scenarios and keeps what it started, to stop it on any exit.
type bench struct {
	bin string
	dir string
	// profDir is where the rows' CPU profiles go.
	profDir string
	plan    plan
	out     io.Writer

	// only, when set, names the scenarios to run (-only).
	only map[string]bool

	mu       sync.Mutex
	children []*child
	gateways int
}

func (b *bench) selected(id string) bool { return b.only == nil || b.only[id] }

// track registers c to be stopped by stopAll.
func (b *bench) track(c *child) {
	b.mu.Lock()
	b.children = append(b.children, c)
	b.mu.Unlock()
}

// stopAll stops every child still running, newest first.
func (b *bench) stopAll() {
	b.mu.Lock()
	cs := b.children
	b.children = nil
	b.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i].stop(syscall.SIGINT, 10*time.Second)
	}
}

func (b *bench) logf(format string, args ...any) { fmt.Fprintf(b.out, format+"\n", args...) }

// gateway starts a fresh poolgate for one scenario, in its own data dir.
func (b *bench) gateway(ctx context.Context, cfg gatewayConfig) (*gateway, error) {
	b.gateways++
	dir := filepath.Join(b.dir, "gw"+strconv.Itoa(b.gateways))
	g, err := startGateway(ctx, b.bin, dir, cfg)
	if err != nil {
		return nil, err
	}
	b.track(g.child)
	return g, nil
}

// compare measures the row's workload against g's first worker directly and
// through g, alternating in rounds, then profiles one more block through g.
func (b *bench) compare(ctx context.Context, g *gateway, r *row, stream bool, body func(int) []byte, ld load) error {
	conns := max(ld.clients, 64)
	if ld.rate > 0 {
		conns = max(conns, int(ld.rate))
	}
	direct := newTarget("direct", "http://127.0.0.1:"+strconv.Itoa(g.workers[0].Port), conns)
	through := newTarget("poolgate", g.url, conns)
	through.key = r.key
	defer direct.close()
	defer through.close()
	targets := []*target{direct, through}
	if r.noDirect {
		targets = targets[1:]
	}
	for _, t := range targets {
		warm := warmUp(ctx, t, stream, body, ld)
		if t == through {
			r.extra += warm.ok.Load() + warm.errs.Load()
		}
	}
	r.direct, r.through, r.idle = newRecorder(), newRecorder(), g.idle
	worker := g.workers[0].PID
	for round := range b.plan.rounds {
		order := []*target{direct, through}
		if round%2 == 1 {
			order[0], order[1] = through, direct
		}
		if r.noDirect {
			order = []*target{through}
		}
		for _, t := range order {
			if err := b.block(ctx, g, r, t == through, worker, func(rec *recorder) {
				drive(ctx, ld, b.plan.rounds, requester(t, stream, body, nil), rec)
			}); err != nil {
				return err
			}
		}
		r.endRound()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if ld.rate > 0 {
		r.note = fmt.Sprintf("late sends: %d direct, %d through", r.direct.late.Load(), r.through.late.Load())
	}
	if err := b.profileRow(ctx, g, r, through, stream, body, ld); err != nil {
		return err
	}
	var err error
	r.mem, err = procMem(g.pid())
	b.logf("  %-44s direct p50 %-9s through p50 %-9s errors %d/%d  gw CPU/req %s  worker %s  top: %s", r.title+", "+r.mode,
		fmtDur(r.direct.lat.quantile(50)), fmtDur(r.through.lat.quantile(50)), r.direct.errs.Load(), r.through.errs.Load(),
		fmtMicros(r.cpuPerRequest()), fmtMicros(r.workerPerRequest()), r.profileText(3))
	return err
}

// warmUp sends t a short burst of the load's requests before it is
// measured, to open its connections and warm caches.
func warmUp(ctx context.Context, t *target, stream bool, body func(int) []byte, ld load) *recorder {
	rec := newRecorder()
	closedLoop(ctx, max(min(ld.clients, 64), 1), 200, 500*time.Millisecond, requester(t, stream, body, nil), rec)
	return rec
}

// block runs one measured block and adds what it measured to r: the
// gateway's CPU and allocations when through, and the worker's CPU either way.
func (b *bench) block(ctx context.Context, g *gateway, r *row, through bool, worker int, run func(*recorder)) error {
	rec := newRecorder()
	c0, err := procCPU(g.pid())
	if err != nil {
		return err
	}
	w0, err := procCPU(worker)
	if err != nil {
		return err
	}
	var a0 allocStats
	if through {
		if a0, err = g.allocs(ctx); err != nil {
			return err
		}
	}
	run(rec)
	c1, err := procCPU(g.pid())
	if err != nil {
		return err
	}
	w1, err := procCPU(worker)
	if err != nil {
		return err
	}
	if !through {
		r.workerDirect += w1 - w0
		r.direct.merge(rec)
		r.pending.direct, r.pending.worker = rec, w1-w0
		return nil
	}
	a1, err := g.allocs(ctx)
	if err != nil {
		return err
	}
	r.cpu += c1 - c0
	r.workerThrough += w1 - w0
	r.mallocs += a1.mallocs - a0.mallocs
	r.allocBytes += a1.bytes - a0.bytes
	r.through.merge(rec)
	r.pending.through, r.pending.cpu = rec, c1-c0
	if r.noDirect {
		r.pending.worker = w1 - w0 // the only worker figure such a row has
	}
	return nil
}

// round is what one round of a row measured: a direct block and the
// through block beside it in time.
type round struct {
	direct, through *recorder // nil when the round had no such block
	cpu, worker     time.Duration
}

// endRound files the round's blocks.
func (r *row) endRound() {
	r.rounds = append(r.rounds, r.pending)
	r.pending = round{}
}

// median returns the median of vs (0 when empty).
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// profileRow records the gateway's CPU profile over one more block through
// it (not counted in the row's figures) and keeps its top entries.
func (b *bench) profileRow(ctx context.Context, g *gateway, r *row, through *target, stream bool, body func(int) []byte, ld load) error {
	d := b.plan.profile
	if d <= 0 {
		return nil
	}
	path := profileName(b.profDir, r.id+r.title, r.mode)
	errc := make(chan error, 2)
	go func() { errc <- g.profile(ctx, "profile", d, path) }()
	go func() { errc <- g.profile(ctx, "allocs", d, strings.TrimSuffix(path, ".pprof")+".allocs.pprof") }()
	pl := load{clients: ld.clients, rate: ld.rate, n: unbounded, dur: d + 300*time.Millisecond}
	rec := newRecorder()
	drive(ctx, pl, 1, requester(through, stream, body, nil), rec)
	r.extra += rec.ok.Load() + rec.errs.Load()
	for range 2 {
		if err := <-errc; err != nil {
			return fmt.Errorf("profile: %w", err)
		}
	}
	var err error
	if r.flat, r.cum, err = profileTop(b.bin, path, 6); err != nil {
		return err
	}
	r.kinds, err = profileBreakdown(b.bin, path)
	return err
}

// drive runs one block: 1/rounds of the load's count and time.
func drive(ctx context.Context, ld load, rounds int, do requestFunc, rec *recorder) {
	dur := ld.dur / time.Duration(rounds)
	if ld.rate > 0 {
		n := int(ld.rate * dur.Seconds())
		constantRate(ctx, ld.rate, n, max(ld.clients, 1), do, rec)
		return
	}
	closedLoop(ctx, ld.clients, max(ld.n/rounds, 1), dur, do, rec)
}

const (
	streamDirective = " [[sim:chunks=100]]"
	delayDirective  = " [[sim:delay=50ms]]"
)

// scenarioSequential is scenario 1: one client, back to back, zero-latency
// worker; non-streaming and streaming.
func (b *bench) scenarioSequential(ctx context.Context) ([]*row, error) {
	limit := 4 * b.plan.block // time bound; the counts normally end it first
	return b.pair(ctx, gatewayConfig{}, &row{id: "1", title: "sequential, c=1", concurrency: 1}, "bench",
		load{clients: 1, n: b.plan.seqN, dur: limit}, load{clients: 1, n: b.plan.seqStreamN, dur: limit})
}

// pair measures a scenario's non-streaming row ns and its streaming twin
// (same id, title and direct setting; 100 events), both with prompt, on a
// fresh poolgate set up as cfg.
func (b *bench) pair(ctx context.Context, cfg gatewayConfig, ns *row, prompt string, nsLoad, stLoad load) ([]*row, error) {
	g, err := b.gateway(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer g.stop(syscall.SIGINT, 10*time.Second)
	ns.mode = "non-stream"
	if err := b.compare(ctx, g, ns, false, fixed(chatBody(false, prompt)), nsLoad); err != nil {
		return nil, err
	}
	st := &row{id: ns.id, title: ns.title, mode: "stream, 100 events", noDirect: ns.noDirect}
	if err := b.compare(ctx, g, st, true, fixed(chatBody(true, prompt+streamDirective)), stLoad); err != nil {
		return nil, err
	}
	return []*row{ns, st}, nil
}

// scenarioSweep measures added latency at the plot's extra concurrencies.
func (b *bench) scenarioSweep(ctx context.Context) ([]*row, error) {
	g, err := b.gateway(ctx, gatewayConfig{})
	if err != nil {
		return nil, err
	}
	defer g.stop(syscall.SIGINT, 10*time.Second)
	var rows []*row
	for _, c := range b.plan.sweep {
		r := &row{id: "sweep", title: fmt.Sprintf("%d clients", c), mode: "non-stream", concurrency: c}
		if err := b.compare(ctx, g, r, false, fixed(chatBody(false, "bench")), load{clients: c, n: unbounded, dur: b.plan.sweepBlock}); err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// scenarioConcurrent is scenario 2: many clients, zero-latency worker.
func (b *bench) scenarioConcurrent(ctx context.Context) ([]*row, error) {
	c := b.plan.clients
	ld := load{clients: c, n: unbounded, dur: b.plan.block}
	return b.pair(ctx, gatewayConfig{}, &row{id: "2", title: fmt.Sprintf("%d clients", c), concurrency: c}, "bench", ld, ld)
}

// scenarioSlow is scenario 3: a worker that takes 50 ms per answer, with
// many clients, so the gateway holds many turns open at once.
func (b *bench) scenarioSlow(ctx context.Context) ([]*row, error) {
	c := b.plan.clients
	ld := load{clients: c, n: unbounded, dur: b.plan.block}
	return b.pair(ctx, gatewayConfig{}, &row{id: "3", title: fmt.Sprintf("50 ms worker, %d clients", c)}, "bench"+delayDirective, ld, ld)
}

// scenarioAffinity is scenario 5: a workload of first turns and follow-ups,
// with affinity in memory and on Redis.
func (b *bench) scenarioAffinity(ctx context.Context) ([]*row, error) {
	return b.perStore(ctx, gatewayConfig{}, func(g *gateway, store string) (*row, error) {
		return b.affinityRow(ctx, g, store)
	})
}

// perStore measures a row with the gateway's state in memory, then on a
// throwaway redis-server (stopped when the scenario ends), each on a fresh
// poolgate set up as cfg.
func (b *bench) perStore(ctx context.Context, cfg gatewayConfig, measure func(g *gateway, store string) (*row, error)) ([]*row, error) {
	var rows []*row
	for _, store := range []string{"memory", "redis"} {
		if store == "redis" {
			rc, url, err := startRedis(ctx, b.dir)
			if err != nil {
				return nil, err
			}
			b.track(rc)
			defer rc.stop(syscall.SIGTERM, 5*time.Second)
			cfg.RedisURL = url
		}
		g, err := b.gateway(ctx, cfg)
		if err != nil {
			return nil, err
		}
		r, err := measure(g, store)
		g.stop(syscall.SIGINT, 10*time.Second)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// redisAddr is the host:port of a redis:// URL.
func redisAddr(url string) string {
	addr := strings.TrimPrefix(url, "redis://")
	if i := strings.IndexByte(addr, '/'); i >= 0 {
		addr = addr[:i]
	}
	return addr
}

func (b *bench) affinityRow(ctx context.Context, g *gateway, store string) (*row, error) {
	redisURL := g.cfg.RedisURL
	c := b.plan.affinityClients
	r := &row{id: "5", title: fmt.Sprintf("affinity on %s, %d clients", store, c), mode: "non-stream"}
	m0, err := g.cacheMisses(ctx)
	if err != nil {
		return nil, err
	}
	var cmds0 int64
	if redisURL != "" {
		if cmds0, err = redisScriptCalls(redisAddr(redisURL)); err != nil {
			return nil, err
		}
	}
	if err := b.compare(ctx, g, r, false, affinityBodies(8*c), load{clients: c, n: unbounded, dur: b.plan.block}); err != nil {
		return nil, err
	}
	m1, err := g.cacheMisses(ctx)
	if err != nil {
		return nil, err
	}
	r.note = fmt.Sprintf("%d affinity misses", m1-m0)
	if redisURL != "" {
		cmds1, err := redisScriptCalls(redisAddr(redisURL))
		if err != nil {
			return nil, err
		}
		// Every request the gateway answered in this row: the measured
		// blocks, the warm-up and the profiled block.
		turns := r.through.ok.Load() + r.extra
		r.note += fmt.Sprintf("; %.2f Redis round trips per request", float64(cmds1-cmds0)/float64(max(turns, 1)))
	}
	return r, nil
}

// benchKeys is one named key with every limit on, each far above what the
// benchmark sends, so that every request pays the limits' bookkeeping and
// none is refused.
const (
	benchKey  = "sk-bench-key"
	benchKeys = `[{"name":"bench","key":"` + benchKey + `","rpm":100000000,"concurrency":100000,"tokens_per_day":1000000000000}]`
)

// scenarioKeys is scenario 7: scenario 2's non-streaming load under a named
// API key with limits, as users run it: limits at admission, usage counting
// and the request log, in memory and on Redis.
func (b *bench) scenarioKeys(ctx context.Context) ([]*row, error) {
	return b.perStore(ctx, gatewayConfig{APIKeys: benchKeys}, func(g *gateway, store string) (*row, error) {
		c := b.plan.clients
		r := &row{id: "7", title: fmt.Sprintf("key with limits, %s, %d clients", store, c), mode: "non-stream", key: benchKey}
		return r, b.compare(ctx, g, r, false, fixed(chatBody(false, "bench")), load{clients: c, n: unbounded, dur: b.plan.block})
	})
}

// scenarioLingma is scenario 6: the lingma driver against the bundled
// simulator. Its worker speaks Lingma's protocol, so there is no direct
// figure: the row shows what a turn costs the gateway through that driver,
// beside the simulator's own CPU per turn.
func (b *bench) scenarioLingma(ctx context.Context) ([]*row, error) {
	c := b.plan.affinityClients
	ld := load{clients: c, n: unbounded, dur: b.plan.block}
	return b.pair(ctx, gatewayConfig{Driver: "lingma"}, &row{id: "6", title: fmt.Sprintf("lingma driver, %d clients", c), noDirect: true}, "bench", ld, ld)
}

// streamsResult is scenario 4: many slow streams open at once.
type streamsResult struct {
	want     int
	maxOpen  int64
	rssOpen  int64 // VmRSS sampled while the most streams were open
	idle     memInfo
	mem      memInfo
	cpu      time.Duration
	rec      *recorder
	lifetime time.Duration
}

// scenarioStreams is scenario 4: open many slow streams through poolgate
// and watch its memory.
func (b *bench) scenarioStreams(ctx context.Context, n int) (*streamsResult, error) {
	const accounts = 4
	g, err := b.gateway(ctx, gatewayConfig{Accounts: accounts, PerInstance: 2 * n / accounts})
	if err != nil {
		return nil, err
	}
	defer g.stop(syscall.SIGINT, 10*time.Second)
	through := newTarget("poolgate", g.url, n)
	defer through.close()
	res := &streamsResult{want: n, idle: g.idle, rec: newRecorder(),
		lifetime: time.Duration(b.plan.streamChunks) * 500 * time.Millisecond}
	var open atomic.Int64
	do := func(ctx context.Context, seq int) outcome {
		body := chatBody(true, fmt.Sprintf("slow stream %d [[sim:chunks=%d]] [[sim:chunk-delay=500ms]]", seq, b.plan.streamChunks))
		o := through.chat(ctx, body, true, func() { open.Add(1) })
		if !o.firstByte.IsZero() {
			open.Add(-1)
		}
		return o
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { res.sample(g.pid(), &open, stop) })
	wg.Go(func() {
		// The heap and the goroutines while every stream is open, kept for
		// a closer look.
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(float64(n)/b.plan.streamRamp*float64(time.Second)) + time.Second):
		}
		for _, kind := range []string{"heap", "heap?debug=1", "goroutine"} {
			if body, err := g.pprofGet(ctx, "/debug/pprof/"+kind, 10*time.Second); err == nil {
				name := fmt.Sprintf("%s-%d-streams.pprof", strings.ReplaceAll(kind, "?debug=1", "-text"), n)
				_ = os.WriteFile(filepath.Join(b.profDir, name), body, 0o644)
			}
		}
	})
	c0, err := procCPU(g.pid())
	if err != nil {
		close(stop)
		wg.Wait()
		return nil, err
	}
	constantRate(ctx, b.plan.streamRamp, n, n, do, res.rec)
	close(stop)
	wg.Wait()
	c1, err := procCPU(g.pid())
	if err != nil {
		return nil, err
	}
	res.cpu = c1 - c0
	if res.mem, err = procMem(g.pid()); err != nil {
		return nil, err
	}
	b.logf("  %-44s open at once %d, RSS then %s, errors %d", fmt.Sprintf("%d slow streams", n), res.maxOpen,
		fmtMiB(res.rssOpen), res.rec.errs.Load())
	return res, ctx.Err()
}

// sample polls the open-stream count and the gateway's RSS until stop.
func (s *streamsResult) sample(pid int, open *atomic.Int64, stop <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		n := open.Load()
		m, err := procMem(pid)
		if err != nil || n < s.maxOpen {
			continue
		}
		if n > s.maxOpen {
			s.maxOpen, s.rssOpen = n, 0
		}
		s.rssOpen = max(s.rssOpen, m.RSS)
	}
}
