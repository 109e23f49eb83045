package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The gateway runs with its loopback-only profiler on (pprof_listen), so a
// row can say where the gateway's CPU went and what it allocated, not only
// how much.

// allocStats are the gateway's cumulative allocation counters.
type allocStats struct {
	mallocs, bytes uint64
}

// allocs reads the runtime's cumulative allocation counters from the text
// heap profile, which ends with the process's MemStats.
func (g *gateway) allocs(ctx context.Context) (allocStats, error) {
	body, err := g.pprofGet(ctx, "/debug/pprof/allocs?debug=1", 10*time.Second)
	if err != nil {
		return allocStats{}, err
	}
	return parseMemStats(body)
}

// parseMemStats finds "# Mallocs = N" and "# TotalAlloc = N" in a debug=1
// heap profile.
func parseMemStats(b []byte) (allocStats, error) {
	var s allocStats
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if !ok {
			continue
		}
		var dst *uint64
		switch k {
		case "Mallocs":
			dst = &s.mallocs
		case "TotalAlloc":
			dst = &s.bytes
		default:
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return s, fmt.Errorf("memstats %s: %w", k, err)
		}
		*dst = n
		seen++
	}
	if seen != 2 {
		return s, fmt.Errorf("memstats: Mallocs or TotalAlloc missing")
	}
	return s, nil
}

// profile records the gateway's pprof profile of kind (profile for CPU,
// allocs for what it allocated, kept for a closer look with go tool pprof
// -sample_index=alloc_space) over d into path.
func (g *gateway) profile(ctx context.Context, kind string, d time.Duration, path string) error {
	secs := max(int(d.Round(time.Second)/time.Second), 1)
	body, err := g.pprofGet(ctx, "/debug/pprof/"+kind+"?seconds="+strconv.Itoa(secs), d+20*time.Second)
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}

// pprofGet fetches path of the gateway's profiler within timeout.
func (g *gateway) pprofGet(ctx context.Context, path string, timeout time.Duration) ([]byte, error) {
	return get(ctx, g.pprofURL+path, timeout)
}

// topEntry is one line of `go tool pprof -top`.
type topEntry struct {
	fn        string  // without its module path
	full      string  // as pprof names it
	flat, cum float64 // percent of the profile
}

// profileTop summarises a CPU profile: the n functions with the most time
// of their own, and the n of poolgate's own functions (and the libraries it
// calls directly) with the most time beneath them.
func profileTop(bin, path string, n int) (flat, cum []topEntry, err error) {
	flatOut, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount="+strconv.Itoa(n), bin, path).Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go tool pprof: %w", err)
	}
	cumOut, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=400", bin, path).Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go tool pprof: %w", err)
	}
	flat = parseTop(flatOut)
	for _, e := range parseTop(cumOut) {
		if len(cum) < n && ownFrame(e.full) {
			cum = append(cum, e)
		}
	}
	return flat, cum, nil
}

// breakdown is a CPU profile's own time summed by what kind of work it is.
type breakdown struct {
	kind  string
	share float64 // percent of the profile
}

// breakdownKinds name the kinds, in the order the report lists them.
var breakdownKinds = []string{"syscalls", "scheduler", "GC+alloc", "stacks", "runtime other", "net/http+net",
	"JSON", "poolgate", "other"}

// kindOf sorts a function (its full name) into a kind of work: the kernel's
// side of sockets and pipes, the scheduler's parking and waking of
// goroutines and threads, the allocator and collector, stack growth, the
// rest of the runtime, Go's HTTP and network code, JSON, poolgate's own
// code, and the rest (gin, Prometheus, Redis, context, sync, time...).
func kindOf(fn string) string {
	switch {
	case strings.HasPrefix(fn, "internal/runtime/syscall"), strings.HasPrefix(fn, "syscall."):
		return "syscalls"
	case hasAnyPrefix(fn, "runtime.futex", "runtime.usleep", "runtime.osyield", "runtime.findRunnable", "runtime.schedule",
		"runtime.stealWork", "runtime.runq", "runtime.netpoll", "runtime.epoll", "runtime.park", "runtime.note",
		"runtime.mPark", "runtime.lock", "runtime.unlock", "runtime.selectgo", "runtime.chan", "runtime.ready",
		"runtime.wakep", "runtime.startm", "runtime.stopm", "runtime.goready", "runtime.gopark", "runtime.execute",
		"runtime.globrunq", "runtime.checkTimers", "runtime.send", "runtime.recv", "runtime.sellock", "runtime.selunlock",
		"runtime.nanotime", "runtime.casgstatus", "runtime.mcall", "runtime.gogo", "runtime.newproc", "runtime.goexit",
		"runtime.(*timer", "runtime.(*timers", "runtime.resetspinning", "runtime.acquirep", "runtime.releasep"):
		return "scheduler"
	case hasAnyPrefix(fn, "runtime.mallocgc", "runtime.gc", "runtime.scan", "runtime.greyobject", "runtime.markBits",
		"runtime.memclr", "runtime.(*mspan)", "runtime.(*mheap)", "runtime.(*mcache)", "runtime.(*mcentral)",
		"runtime.sweep", "runtime.nextFreeFast", "runtime.heapBits", "internal/runtime/gc", "runtime.typePointers",
		"runtime.findObject", "runtime.wbBuf", "runtime.bulkBarrier", "runtime.newobject", "runtime.makeslice",
		"runtime.growslice", "runtime.(*gcWork)", "runtime.markroot", "runtime.spanOf", "runtime.tryDeferToSpanScan",
		"runtime.(*gcControllerState)", "runtime.(*spanSet)", "runtime.(*sweepLocked)", "runtime.(*pageAlloc)",
		"runtime.deductAssistCredit", "runtime.memmove", "runtime.rawstring", "runtime.slicebytetostring",
		"runtime.concatstring", "runtime.makemap", "runtime.mapassign", "runtime.(*gcBits)", "runtime.spanClass"):
		return "GC+alloc"
	case hasAnyPrefix(fn, "runtime.copystack", "runtime.newstack", "runtime.pcvalue", "runtime.step", "runtime.adjust",
		"runtime.(*unwinder)", "runtime.funcInfo", "runtime.findfunc", "runtime.morestack", "runtime.readvarint"):
		return "stacks"
	case strings.HasPrefix(fn, "runtime."), strings.HasPrefix(fn, "internal/runtime"), fn == "aeshashbody",
		fn == "memeqbody", fn == "indexbytebody", strings.HasPrefix(fn, "internal/bytealg"):
		return "runtime other"
	case hasAnyPrefix(fn, "net/http.", "net/textproto.", "net.", "internal/poll.", "bufio.", "net/url."):
		return "net/http+net"
	case strings.HasPrefix(fn, "encoding/json."), strings.Contains(fn, "poolgate/internal/jsonx"):
		return "JSON"
	case strings.HasPrefix(fn, "github.com/poolgate/"):
		return "poolgate"
	}
	return "other"
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(s, p) })
}

// profileBreakdown sums a CPU profile's own time by kind of work.
func profileBreakdown(bin, path string) ([]breakdown, error) {
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=100000", "-nodefraction=0", "-edgefraction=0", bin, path).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof: %w", err)
	}
	sums := map[string]float64{}
	for _, e := range parseTop(out) {
		sums[kindOf(e.full)] += e.flat
	}
	var bd []breakdown
	for _, k := range breakdownKinds {
		bd = append(bd, breakdown{kind: k, share: sums[k]})
	}
	return bd, nil
}

// ownFrame says whether a function is worth listing by cumulative time: the
// gateway's own code and the encoders and transports it drives, not the
// runtime's scheduler or the server's connection loop that sit under all.
func ownFrame(fn string) bool {
	switch {
	case strings.Contains(fn, ".func"), strings.Contains(fn, "poolgate/handlers."), strings.Contains(fn, ".(*Handler)."):
		return false // closures (middleware), the HTTP layer and the protocols' entry points sit above everything
	case strings.Contains(fn, "poolgate/"):
		return true
	case strings.HasPrefix(fn, "encoding/json."), strings.HasPrefix(fn, "github.com/redis/"):
		return true
	}
	return false
}

// parseTop reads the rows of `go tool pprof -top` output:
//
//	flat  flat%   sum%        cum   cum%
//	10ms 12.5% 12.5%       20ms 25.0%  runtime.futex
func parseTop(out []byte) []topEntry {
	var es []topEntry
	inRows := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && f[0] == "flat" && f[1] == "flat%" {
			inRows = true
			continue
		}
		if !inRows || len(f) < 6 {
			continue
		}
		flat, err1 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cum, err2 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		full := strings.TrimSuffix(strings.Join(f[5:], " "), " (inline)")
		es = append(es, topEntry{fn: shortFn(full), full: full, flat: flat, cum: cum})
	}
	return es
}

// shortFn drops the module path of a function name.
func shortFn(fn string) string {
	fn = strings.TrimSuffix(fn, " (inline)")
	if i := strings.LastIndexByte(fn, '/'); i >= 0 {
		return fn[i+1:]
	}
	return fn
}

// profileName is the file a row's CPU profile is kept in.
func profileName(dir, id, mode string) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(id+"-"+mode))
	return filepath.Join(dir, "cpu-"+clean+".pprof")
}
