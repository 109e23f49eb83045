package main

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machine describes where the run happened.
type machine struct {
	cpu, kernel, goVersion, commit string
	cores                          int
	dirty                          bool
}

func describeMachine(bin string) machine {
	m := machine{cpu: "unknown", kernel: "unknown", cores: runtime.NumCPU(), goVersion: runtime.Version(), commit: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.cpu = cpuModel(b)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	if bi, err := buildinfo.ReadFile(bin); err == nil {
		m.goVersion = bi.GoVersion
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.commit = strings.TrimSpace(string(out))
	}
	// The report's own outputs, from an earlier run, are not the code measured.
	if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ".",
		":!docs/benchmarks.md", ":!docs/bench-latency.svg").Output(); err == nil {
		m.dirty = len(bytes.TrimSpace(out)) > 0
	}
	return m
}

// cpuModel returns the first "model name" of /proc/cpuinfo text.
func cpuModel(b []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func mdTable(b *strings.Builder, head []string, rows [][]string) {
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString(strings.Repeat("| --- ", len(head)) + "|\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	b.WriteString("\n")
}

// markdown renders docs/benchmarks.md.
func (res *results) markdown(svgName string) string {
	var b strings.Builder
	m := res.machine
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("What the gateway costs: the same simulated worker measured directly and through poolgate in one run, " +
		"by `bench/` (`make bench` for the short run, `make bench-full` for everything). This file is written by the " +
		"harness; re-run it rather than editing the numbers.\n\n")
	if res.plan.short {
		b.WriteString(fmt.Sprintf("> **Short run** (`make bench`): fewer requests per scenario and %d streams instead of 5,000 in "+
			"scenario 4. Run `make bench-full` for the full set.\n\n", res.plan.streams))
	}
	if res.note != "" {
		b.WriteString("> **Note:** " + res.note + "\n\n")
	}
	commit := m.commit
	if m.dirty {
		commit += " (with uncommitted changes)"
	}
	b.WriteString("## Machine\n\n")
	mdTable(&b, []string{"", ""}, [][]string{
		{"CPU", fmt.Sprintf("%s, %d cores", m.cpu, m.cores)},
		{"kernel", m.kernel},
		{"Go (poolgate binary)", m.goVersion},
		{"date", res.started.UTC().Format("2006-01-02 15:04 MST")},
		{"commit", commit},
		{"run", fmt.Sprintf("%s, %s", map[bool]string{true: "short", false: "full"}[res.plan.short], res.took.Round(time.Second))},
		{"load average (1 min) before / after", fmt.Sprintf("%.2f / %.2f", res.loadBefore, res.loadAfter)},
	})
	b.WriteString("## Targets\n\n")
	b.WriteString("The speed and memory targets, each beside the figure measured on the same kind of machine before the work to meet them (*was*). " +
		"For scale: the best Go gateway measured on this kind of machine spends about 180 µs of CPU per request and " +
		"adds about 0.4 ms at concurrency 1.\n\n")
	mdTable(&b, []string{"target", "measured", "result"}, res.targets())
	if len(res.floor) > 0 {
		b.WriteString("## The floor: the simplest Go proxies, same worker, same rounds\n\n")
		b.WriteString("The main workloads of scenarios 1 to 3 against the same worker directly and through three " +
			"processes, each round running a direct block and one block through each, in an order that rotates " +
			"from round to round. The *byte pipe* parses nothing: per connection two goroutines copy bytes each way, so " +
			"what it adds is what any process in the path costs on this machine (two more loopback socket hops and " +
			"the wake-ups of one more process). *httputil.ReverseProxy* is the standard library's HTTP proxy: it " +
			"parses and forwards HTTP and does nothing else (no JSON, no routing, no accounting). poolgate does " +
			"all of that. *added* is the median over rounds of each round's difference from the direct block at " +
			"that percentile (for the stream, of the first event); CPU is the proxy process's own per request, the " +
			"median over rounds.\n\n")
		head, cells := floorTable(res.floor)
		mdTable(&b, head, cells)
	}
	b.WriteString("## Results\n\n")
	b.WriteString("Latencies are whole answers (the last byte); TTFB is the response headers for non-streaming requests " +
		"and the first SSE `data:` line for streams. *added* is through poolgate minus direct at the same percentile, " +
		"the median over rounds of each round's difference (req/s: relative change over the whole row). Gateway CPU is " +
		"utime+stime of the poolgate process alone over a block through it, divided by the block's requests (and, for " +
		"streams, by the SSE events it relayed), the median over rounds; the percentiles of the direct and poolgate " +
		"lines are over every round together; *worker CPU/req* is the worker " +
		"process's own over the direct blocks, the floor under the gateway's; *gw allocs/req* counts the gateway's heap " +
		"allocations (and bytes) per request over the blocks through it, from the runtime's own counters; peak RSS is " +
		"its VmHWM at the end of the row, idle RSS its VmRSS once every worker was ready. The run starts a fresh copy " +
		"of the binary under test: how the kernel holds the pages of the file (just written by the linker, or run " +
		"many times) changed how many of them a new process maps by 2-3 MiB of RSS from run to run, while the " +
		"gateway's own (anonymous) memory stayed the same.\n\n")
	mdTable(&b, tableHead, res.tableRows())
	for _, s := range res.streams {
		b.WriteString(fmt.Sprintf("### Scenario 4: %d slow streams at once\n\n", s.want))
		b.WriteString(fmt.Sprintf("Streams of %d chunks 500 ms apart (about %s each), opened at %.0f per second through "+
			"poolgate over 4 workers. *RSS, all open* is the gateway's VmRSS sampled while the most streams were open; "+
			"time to first event counts from each stream's scheduled open (the worker sends its first chunk at once), "+
			"and *late opens* counts streams the harness opened over a millisecond behind schedule.\n\n",
			res.plan.streamChunks, s.lifetime, res.plan.streamRamp))
		mdTable(&b, streamsHead, [][]string{s.tableRow()})
	}
	if len(res.allocs) > 0 {
		b.WriteString("## Allocation budget of the handler path\n\n")
		b.WriteString("`cmd/poolgate/internal/daemon`'s `BenchmarkRequestPath` with `-benchmem`: one request through the gateway wired as " +
			"the daemon wires it (engine, key check, accounting with usage and the request log, protocol decode and encode, " +
			"relay, router with affinity in memory, pool, openai driver) against the same simulated worker process, " +
			"with only the inbound connection left out. Allocations and bytes are per request (per stream of 100 " +
			"events for the streaming row); time per request includes the worker's answer. The rows named *traced* run " +
			"with OpenTelemetry tracing on, every span exported over OTLP/HTTP to a receiver on loopback that discards " +
			"them; the others with tracing off, the default.\n\n")
		var rows [][]string
		for _, a := range res.allocs {
			v := "missed"
			if a.met() {
				v = "met"
			}
			rows = append(rows, []string{a.name, fmt.Sprint(a.allocs), fmtBytes(uint64(a.bytes)),
				fmt.Sprintf("%.1f µs", a.nsPerOp/1e3), fmt.Sprintf("%d allocs, %s", a.budgetAllocs, fmtBytes(uint64(a.budgetBytes))), v})
		}
		mdTable(&b, []string{"request", "allocs/op", "B/op", "time/op", "budget", "result"}, rows)
	}
	b.WriteString("## Where the gateway's CPU goes\n\n")
	b.WriteString(fmt.Sprintf("Each row's CPU profile, taken from the gateway's loopback-only profiler "+
		"(`pprof_listen`) over one more block of %s through it after the measured ones. *Own time* lists the functions "+
		"that burn the most CPU themselves (mostly the runtime and the kernel's side of the sockets); *beneath* lists "+
		"poolgate's own functions below the HTTP layer (the relay, the router, the drivers; and the JSON and Redis "+
		"code they call) by the share of the profile spent in them and below.\n\n", res.plan.profile))
	var prof [][]string
	for _, r := range res.rows {
		if len(r.flat) > 0 {
			prof = append(prof, []string{r.id + ": " + r.title, r.mode, topText(r.flat, 6, false), topText(r.cum, 6, true)})
		}
	}
	mdTable(&b, []string{"scenario", "mode", "own time", "beneath"}, prof)
	b.WriteString("The same profiles' own time by kind of work, in percent of the gateway's CPU: the kernel's side of " +
		"its sockets (*syscalls*), parking and waking goroutines and threads (*scheduler*), the allocator and the " +
		"collector, stack growth, the rest of the runtime, Go's HTTP client and server, JSON, poolgate's own code, and " +
		"the rest (gin, Prometheus, Redis client, context, sync, time). What a row spends beyond *poolgate* and *JSON* " +
		"is mostly the price of two HTTP hops through `net/http` on loopback, which the direct figure pays only once.\n\n")
	var kinds [][]string
	for _, r := range res.rows {
		if len(r.kinds) == 0 {
			continue
		}
		line := []string{r.id + ": " + r.title, r.mode}
		for _, k := range r.kinds {
			line = append(line, fmt.Sprintf("%.0f", k.share))
		}
		kinds = append(kinds, line)
	}
	mdTable(&b, append([]string{"scenario", "mode"}, breakdownKinds...), kinds)
	b.WriteString(whatIsLeft)
	b.WriteString("## Added latency against concurrency\n\n")
	b.WriteString(fmt.Sprintf("![added latency, p50 and p99, through poolgate minus direct, non-streaming](%s)\n\n", svgName))
	b.WriteString(methodText)
	return b.String()
}

const methodText = `## Method

- **Workers**: ` + "`poolgate simworker --protocol=openai`" + ` processes spawned by poolgate itself
  (` + "`POOLGATE_DRIVER=openai`" + `, one per account). *direct* sends the same requests to that very worker
  process, at the port ` + "`/internal/pool`" + ` lists, so the only difference is the gateway hop. Each scenario
  gets a fresh poolgate with ` + "`POOLGATE_LOG_LEVEL=warn`" + ` (logging stays out of the measurement) and one
  worker, except scenario 4 (four workers).
- **Alternation**: every measurement is split into rounds that alternate direct and through poolgate (and swap
  the order each round), after a warm-up that opens connections, so drift on the machine hits both alike. The
  figures the targets check (added latency, CPU per request) are medians over rounds of each round's own
  figure, so one block hit by another tenant of the machine does not decide a row.
- **Load**: closed loop (N clients back to back) for scenarios 1, 2, 3, 5, 6 and the sweep; constant rate (open
  loop, bounded in-flight) for scenario 4, with latency counted from each request's *scheduled* send
  time so a stall shows in the requests it delays (no coordinated omission). HDR histograms (1 µs to 10 min,
  3 significant digits). One tuned ` + "`http.Transport`" + ` per target, with enough idle connections per host
  for every client.
- **Scenarios**: (1) one client, zero-latency worker; (2) 50 clients, zero-latency worker; (3) a worker that
  waits 50 ms before answering, with 50 clients; (4) thousands of slow streams at once, for memory;
  (5) a mix of first turns and follow-ups (each follow-up continues a conversation started earlier, so it can
  find its affinity entry), with affinity in memory and on a real ` + "`redis-server`" + `; every request
  pays the lookup and the write-back. OpenAI-style workers have no upstream session to reuse, so a found
  entry only routes the turn, which still carries the whole transcript; the note counts follow-ups that found
  no entry; on Redis it also counts the gateway's round trips per request (the server's script calls, one per
  affinity step: a first turn writes its entry back, a follow-up also takes one first). (6) the lingma driver
  against the bundled simulator, 16 clients, through only (its worker speaks Lingma's protocol, not HTTP), with
  the simulator's own CPU per turn beside the gateway's. (7) scenario 2's load under a named API key with every
  limit on (far above the load, so none refuses), in memory and on Redis: admission, usage counting and the
  request log as users run them (usage and the request log are on in every row; only the limits are new here).
  Streams are 100 content deltas (` + "`[[sim:chunks=100]]`" + `), read to the end of the body so that connections
  are reused; scenario 4's streams are short (one chunk per 500 ms), so its CPU per event is mostly the cost of
  opening a stream.
- **Profiles**: after each row's measured rounds, one more block runs through the gateway while its CPU profile
  and an allocation profile are taken from ` + "`pprof_listen`" + ` (a loopback-only listener, off unless configured).
- **CPU** comes from ` + "`/proc/<pid>/stat`" + ` (10 ms ticks; every block runs long enough for that to be a
  few percent at most). The load generator, the worker and the gateway share the machine's cores, so at high
  concurrency the numbers describe a saturated machine, not the gateway alone.
- **Options**: ` + "`go run ./bench -h`" + `; ` + "`-only 4`" + ` (or ` + "`1,2,3,5,6,7,sweep,allocs`" + `) runs some scenarios
  and only prints them; ` + "`-note`" + ` puts a remark at the top of this file; ` + "`-profiles DIR`" + ` keeps every row's
  CPU and allocation profile (and scenario 4's heap and goroutines) for ` + "`go tool pprof`" + `.

## Go micro-benchmarks

The hot paths one request crosses, in isolation:

` + "```sh" + `
go test -run '^$' -bench . -benchmem ./handlers/... ./pool/ ./pool/modelserver/ ./pool/textchat/ ./session/
make build && POOLGATE_TEST_BIN=$PWD/bin/poolgate go test ./cmd/poolgate/internal/daemon -run '^$' -bench RequestPath -benchmem
` + "```" + `

Request decode per protocol and SSE encode per event (` + "`handlers/*`" + `), the affinity key of a
20-message transcript and the pick of an instance (` + "`pool/route`" + `: ` + "`BenchmarkConversationKey`" + `,
` + "`BenchmarkAcquireRelease`" + `), the openai driver's stream parsing, the prompt contract's render and parse,
and the in-memory session store; ` + "`BenchmarkRequestPath`" + ` is the whole handler path of the allocation budget above.
`

// writeFile writes data to path through a temporary file, so an
// interrupted run never leaves a half-written report.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// whatIsLeft explains the missed targets from the profiles above; revisit
// it when the HTTP server or the drivers change.
const whatIsLeft = `### What is left, and what would lower it

The worker side no longer goes through ` + "`" + `net/http` + "`" + `: a turn's HTTP/1.1 exchange runs on the handler's goroutine over a keep-alive connection the ` + "`" + `openai` + "`" + ` driver keeps itself (the request in one writev, the answer read where it is relayed, no client goroutines), a non-streaming answer of the common shape is read in one pass, the usage and request-log writers take a value without waking a goroutine (and the in-memory request log is a true ring: once full, it used to copy every kept entry into a new slice on each batch, 17% of the bytes the gateway allocated at 50 clients), and a Lingma turn is read on the handler's goroutine too, each of its messages read in one pass, with one timer per connection bounding its writes (4,280 to 870 allocations per 100-event stream; its CPU per turn went from about 1.2 to about 1.0 times the simulator's own). A Chat Completions request of the shapes agents send is read in one pass as well (` + "`" + `internal/openaiwire/fast.go` + "`" + `: 6-8 µs and 46 allocations for a typical agent turn, against 16-19 µs and 81 by reflection; the Messages and Responses decoders still use reflection). The machine moves these rows by 10-20% from run to run; the worker's own CPU per request in the same row shows how slow a run was, and the gateway has stayed at 2.0-2.5 times the worker's figure.

**Why the latency rows stop where they are.** The floor table above measures it: a byte pipe, which parses nothing, adds +0.04 to +0.08 ms at one client and +0.16 to +0.9 ms p50 to the 50 ms row (from run to run); the standard library's HTTP-only ` + "`" + `ReverseProxy` + "`" + `, which does none of poolgate's work (no JSON, no routing, no accounting), adds +0.16 to +0.2 ms at one client and +0.6 to +1.8 ms p50 to the 50 ms row from run to run, where poolgate adds +0.6 to +1.1 ms. So the distance from the pipe to the targets is what being an HTTP server and client in Go costs on this machine, not poolgate's own work: poolgate now meets +0.2 ms at one client, with little to spare, and +0.3 ms p50 (or +2 ms p99) on the 50 ms row would need an HTTP stack cheaper than ` + "`" + `net/http` + "`" + ` on both sides; ` + "`" + `ReverseProxy` + "`" + ` misses them too. A trace of one turn at one client with a 20 ms worker (` + "`" + `perf record -e sched:sched_switch,sched:sched_wakeup,raw_syscalls:sys_enter,raw_syscalls:sys_exit` + "`" + ` on the client, poolgate and the worker) shows where poolgate's 0.4-0.5 ms go: on the way in about 240 µs, of which about 60 µs waiting for the client's own threads to leave the CPU and about 40 µs lost when the Go runtime wakes a second thread (for the goroutine net/http starts per request, or for a timer) and that thread preempts the handler's on the same CPU; on the way back about 300 µs: the worker's write that wakes poolgate (about 100 µs, paid in the worker), poolgate's read, about 160 µs of handling and its write to the client. After a 20-50 ms pause the same code runs two to three times slower than in a busy loop (cold caches, a halted virtual CPU to wake per hop): the 50 ms row's added time is mostly that, not work poolgate could skip. Tried and dropped because the rows did not move beyond noise: one timer per worker pool instead of a connection deadline per turn (six fewer runtime timer changes per turn), passing a stream's first event without the goroutine hop, and never holding back a stream's first event.

**Time to first token** of a stream at one client. A syscall trace of one stream (the same tracepoints) found two causes of poolgate's gap to ` + "`" + `ReverseProxy` + "`" + `, both removed: the simulated worker writes its 100 chunks back to back, so when poolgate had handled the first chunk the next 15-20 were already read; the relay then held the first event in the response's buffer while others waited and the client's first read held 16-19 events (2 direct), and the per-stream forwarding goroutine ran first and parsed everything already read before the handler wrote anything. Now the first event is written at once, with the protocol's opening in the same write, and the answer is read on the handler's goroutine (` + "`" + `Router.Open` + "`" + ` hands over a ` + "`" + `chat.Answer` + "`" + `, no goroutine or channel per stream): in the trace the gateway's time from the worker's first chunk to its write to the client went from 146 µs to 70 µs at the median, and in the floor tables of the full runs since, poolgate adds +0.42 to +0.49 ms against ` + "`" + `ReverseProxy` + "`" + `'s +0.29 to +0.36 ms (+0.70 against +0.42 before). What is left is scheduling on two vCPUs shared with the client and a worker that writes without pause: the trace shows poolgate's poller thread woken on the CPU the worker is running on and waiting there up to a millisecond while the other CPU idles, which no code in the gateway can shorten.

**CPU**: what a request pays beyond poolgate's own code (see the breakdown above) is the kernel's side of two loopback connections, the wake-ups between them, the collector, and Go's HTTP server under gin: its goroutine per connection plus the background reader it starts for every request (to notice a caller that goes away). Going lower would mean another HTTP server under gin. The floor table puts the non-streaming rows at ` + "`" + `ReverseProxy` + "`" + `'s own CPU per request or below it; at one client both spend 190-250 µs per request from run to run, so the 200 µs target there is about the price of the two ` + "`" + `net/http` + "`" + ` hops alone. A stream costs poolgate 1.3-1.8 µs per event more than ` + "`" + `ReverseProxy` + "`" + ` at 50 clients: it reads each chunk's JSON and writes a new chunk in the client's protocol (stop sequences, token counting, the other protocols' shapes), where the proxy copies bytes.

`
