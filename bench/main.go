// Command bench is poolgate's benchmark harness: it measures what the
// gateway costs by sending the same load to one simulated worker directly and
// through poolgate, in one run, and writes docs/benchmarks.md and a plot of
// the added latency. It sits outside the daemon: it only starts bin/poolgate
// (which spawns its own simulated workers) and redis-server as processes and
// talks to them over loopback HTTP.
//
//	go run ./bench -short -bin bin/poolgate   # make bench: under two minutes
//	go run ./bench -bin bin/poolgate          # make bench-full
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	short := fs.Bool("short", false, "the short run (under two minutes): fewer requests, 1,000 streams in scenario 4")
	bin := fs.String("bin", "bin/poolgate", "the poolgate binary to measure (make build)")
	out := fs.String("out", "docs/benchmarks.md", "where to write the report")
	svg := fs.String("svg", "docs/bench-latency.svg", "where to write the added-latency plot")
	note := fs.String("note", "", "a remark to put at the top of the report (for example about the machine)")
	only := fs.String("only", "", "run only these scenarios (comma-separated: 1,2,3,4,5,6,7,sweep,floor,allocs) and print them; writes no files")
	profiles := fs.String("profiles", "", "keep each row's CPU profile in this directory (default: a temporary one, removed)")
	profLen := fs.Duration("profile", 0, "length of each row's profiled block (default 2s short, 3s full)")
	proxy := fs.String("proxy", "", "serve a reference proxy (pipe or reverse) instead; the floor scenario starts the harness so")
	proxyListen := fs.String("proxy-listen", "", "the reference proxy's address")
	proxyTarget := fs.String("proxy-target", "", "the worker the reference proxy forwards to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *proxy != "" {
		return runProxy(ctx, *proxy, *proxyListen, *proxyTarget)
	}
	binPath, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(binPath); err != nil {
		return fmt.Errorf("%w (build it with `make build`)", err)
	}
	if _, err := raiseNoFile(); err != nil {
		return fmt.Errorf("raise the open-file limit: %w", err)
	}
	dir, err := os.MkdirTemp("", "poolgate-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The run starts a fresh copy of the binary: how the kernel holds the
	// pages of the file (just linked, or run many times) changed how many of
	// them a new process maps by 2-3 MiB of RSS from run to run, none of it
	// the gateway's own memory.
	if binPath, err = copyBinary(binPath, dir); err != nil {
		return err
	}
	b := &bench{bin: binPath, dir: dir, profDir: dir, plan: newPlan(*short), out: stdout}
	if *profLen > 0 {
		b.plan.profile = *profLen
	}
	if *profiles != "" {
		if err := os.MkdirAll(*profiles, 0o755); err != nil {
			return err
		}
		b.profDir = *profiles
	}
	if *only != "" {
		b.only = map[string]bool{}
		for _, id := range strings.Split(*only, ",") {
			b.only[strings.TrimSpace(id)] = true
		}
	}
	defer b.stopAll() // also on error and Ctrl-C: no process outlives the run
	res, err := b.runAll(ctx)
	if err != nil {
		return err
	}
	res.note = *note
	fmt.Fprintln(stdout)
	if err := res.printTable(stdout); err != nil {
		return err
	}
	if b.only != nil {
		return nil // a partial run must not replace the report
	}
	if err := res.write(*out, *svg); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s and %s\n", *out, *svg)
	return nil
}

// write saves the plot to svg and the report, which links to it, to out.
func (res *results) write(out, svg string) error {
	plotTitle := "Added latency through poolgate, non-streaming (through − direct)"
	if err := writeFile(svg, []byte(plotSVG(res.plotPoints(), plotTitle))); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(out), svg)
	if err != nil {
		rel = svg
	}
	return writeFile(out, []byte(res.markdown(rel)))
}

// runAll runs every scenario in turn, each against a fresh poolgate.
func (b *bench) runAll(ctx context.Context) (*results, error) {
	res := &results{plan: b.plan, machine: describeMachine(b.bin), started: time.Now(), loadBefore: loadavg()}
	kind := map[bool]string{true: "short", false: "full"}[b.plan.short]
	b.logf("poolgate benchmark (%s run): %s, %d cores, load average %.2f", kind, res.machine.cpu, res.machine.cores, res.loadBefore)
	steps := []struct {
		id, name string
		run      func(context.Context) ([]*row, error)
	}{
		{"1", "1: sequential", b.scenarioSequential},
		{"2", "2: concurrent clients", b.scenarioConcurrent},
		{"3", "3: 50 ms worker, concurrent clients", b.scenarioSlow},
		{"5", "5: affinity in memory and on Redis", b.scenarioAffinity},
		{"6", "6: the lingma driver", b.scenarioLingma},
		{"7", "7: a named key with limits, usage and the request log", b.scenarioKeys},
		{"sweep", "sweep: added latency against concurrency", b.scenarioSweep},
	}
	for _, s := range steps {
		if !b.selected(s.id) {
			continue
		}
		b.logf("scenario %s", s.name)
		rows, err := s.run(ctx)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", s.name, err)
		}
		res.rows = append(res.rows, rows...)
	}
	if b.selected("floor") {
		b.logf("floor: the same workloads through a byte pipe and httputil.ReverseProxy")
		var err error
		if res.floor, err = b.scenarioFloor(ctx); err != nil {
			return nil, fmt.Errorf("floor: %w", err)
		}
	}
	for _, n := range b.plan.streams {
		if !b.selected("4") {
			break
		}
		b.logf("scenario 4: %d slow streams", n)
		s, err := b.scenarioStreams(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("scenario 4: %w", err)
		}
		res.streams = append(res.streams, s)
	}
	if b.selected("allocs") {
		b.logf("allocation budget: go test -bench RequestPath ./cmd/poolgate/internal/daemon")
		n := map[bool]int{true: 2000, false: 10000}[b.plan.short]
		var err error
		if res.allocs, err = runAllocBudget(ctx, b.bin, n); err != nil {
			return nil, err
		}
		for _, a := range res.allocs {
			b.logf("  %-44s %d allocs, %d B per request", a.name, a.allocs, a.bytes)
		}
	}
	res.took, res.loadAfter = time.Since(res.started), loadavg()
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil, ctx.Err()
	}
	return res, nil
}

// copyBinary copies the executable at path into dir and returns the copy's
// path.
func copyBinary(path, dir string) (string, error) {
	src, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer src.Close()
	dst := filepath.Join(dir, filepath.Base(path))
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return "", err
	}
	return dst, out.Close()
}
