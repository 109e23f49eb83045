package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The floor scenario puts the targets in scale: the same worker and load
// behind the two simplest Go proxies there are, measured beside poolgate in
// the same rounds. The byte pipe parses nothing (two goroutines copy bytes
// each way), so what it adds is what any process in the path costs here:
// two more socket hops and the wake-ups of one more process. The reverse
// proxy is net/http/httputil's, which parses HTTP and nothing else.

// A reference proxy's kinds.
const (
	proxyPipe    = "pipe"
	proxyReverse = "reverse"
)

// runProxy serves one reference proxy on listen, forwarding to target,
// until ctx ends. The harness starts it as a process of its own (bench
// -proxy), so that its CPU is counted apart.
func runProxy(ctx context.Context, kind, listen, target string) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		_ = l.Close()
	}()
	switch kind {
	case proxyReverse:
		rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
		rp.Transport = &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
		srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) && ctx.Err() == nil {
			return err
		}
		return nil
	case proxyPipe:
		for {
			c, err := l.Accept()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			go pipe(c, target)
		}
	}
	return fmt.Errorf("unknown proxy %q (want %s or %s)", kind, proxyPipe, proxyReverse)
}

// pipe copies bytes between c and a new connection to target, both ways,
// until either side closes.
func pipe(c net.Conn, target string) {
	defer c.Close()
	u, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(u, c)
		_ = u.(*net.TCPConn).CloseWrite()
	})
	_, _ = io.Copy(c, u)
	_ = c.(*net.TCPConn).CloseWrite()
	wg.Wait()
}

// startProxy starts a reference proxy in front of the worker at target and
// waits until it accepts connections.
func (b *bench) startProxy(ctx context.Context, kind, target string) (*child, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(self, "-proxy", kind, "-proxy-listen", addr, "-proxy-target", target)
	cmd.Env = cleanEnv()
	c, err := startChild("proxy "+kind, cmd, filepath.Join(b.dir, "proxy-"+kind+".log"))
	if err != nil {
		return nil, "", err
	}
	b.track(c)
	err = c.waitReady(ctx, 10*time.Second, func() error {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err
	})
	if err != nil {
		c.stop(syscall.SIGKILL, time.Second)
		return nil, "", fmt.Errorf("proxy %s did not listen on %s: %w\n%s", kind, addr, err, c.logTail())
	}
	return c, "http://" + addr, nil
}

// floorRow is one workload sent directly and through each of floorVias.
type floorRow struct {
	title  string
	stream bool
	// per via: added p50 and p99 of the whole answer (of the first event for
	// streams), and CPU per request, each the median over rounds.
	added50, added99, cpu [len(floorVias)]time.Duration
	// sent and failed count the requests through each via, and firstErr
	// is the first failure through it. A reference proxy may fail some
	// (the reverse proxy cuts a few streams here); poolgate may not.
	sent, failed [len(floorVias)]int64
	firstErr     [len(floorVias)]error
}

// floorVias are the columns of the floor table, in order; poolgate's is
// the last.
var floorVias = [...]string{"byte pipe", "httputil.ReverseProxy", "poolgate"}

const floorPoolgate = len(floorVias) - 1

// scenarioFloor measures scenario 1's, 2's and 3's main workloads through
// the two reference proxies and poolgate, rotating the order in each round.
func (b *bench) scenarioFloor(ctx context.Context) ([]*floorRow, error) {
	g, err := b.gateway(ctx, gatewayConfig{})
	if err != nil {
		return nil, err
	}
	defer g.stop(syscall.SIGINT, 10*time.Second)
	worker := "127.0.0.1:" + strconv.Itoa(g.workers[0].Port)
	pids := [len(floorVias)]int{floorPoolgate: g.pid()}
	urls := [len(floorVias)]string{floorPoolgate: g.url}
	for i, kind := range []string{proxyPipe, proxyReverse} {
		c, u, err := b.startProxy(ctx, kind, worker)
		if err != nil {
			return nil, err
		}
		defer c.stop(syscall.SIGINT, 5*time.Second)
		pids[i], urls[i] = c.pid(), u
	}
	half := b.plan.block / 2 // four targets per workload: keep the run's length in bounds
	seq := load{clients: 1, n: b.plan.seqN / 2, dur: 2 * half}
	many := load{clients: b.plan.clients, n: unbounded, dur: half}
	work := []struct {
		title  string
		stream bool
		prompt string
		ld     load
	}{
		{"non-stream, 1 client", false, "bench", seq},
		{fmt.Sprintf("non-stream, %d clients", b.plan.clients), false, "bench", many},
		{fmt.Sprintf("50 ms worker, %d clients", b.plan.clients), false, "bench" + delayDirective, many},
		{"stream (100 chunks), 1 client: first event", true, "bench" + streamDirective,
			load{clients: 1, n: b.plan.seqStreamN / 2, dur: 2 * half}},
		{fmt.Sprintf("stream (100 chunks), %d clients: first event", b.plan.clients), true, "bench" + streamDirective, many},
	}
	var rows []*floorRow
	for _, w := range work {
		r, err := b.floorRow(ctx, w.title, w.stream, fixed(chatBody(w.stream, w.prompt)), w.ld, worker, urls, pids)
		if err != nil {
			return nil, err
		}
		b.logf("  %-44s added p50 %s / %s / %s (pipe / ReverseProxy / poolgate); CPU/req %s / %s / %s", w.title,
			fmtDelta(r.added50[0]), fmtDelta(r.added50[1]), fmtDelta(r.added50[2]),
			fmtMicros(r.cpu[0]), fmtMicros(r.cpu[1]), fmtMicros(r.cpu[2]))
		rows = append(rows, r)
	}
	return rows, nil
}

// floorRow measures one workload: in each round a direct block, then a
// block through each via, in an order that rotates from round to round.
func (b *bench) floorRow(ctx context.Context, title string, stream bool, body func(int) []byte, ld load,
	worker string, urls [len(floorVias)]string, pids [len(floorVias)]int) (*floorRow, error) {
	conns := max(ld.clients, 64)
	targets := []*target{newTarget("direct", "http://"+worker, conns)}
	for i, u := range urls {
		targets = append(targets, newTarget(floorVias[i], u, conns))
	}
	for _, t := range targets {
		defer t.close()
		warmUp(ctx, t, stream, body, ld)
	}
	r := &floorRow{title: title, stream: stream}
	var a50, a99, cpu [len(floorVias)][]float64
	for round := range b.plan.rounds {
		var direct *recorder
		blocks := [len(floorVias)]*recorder{}
		for k := range targets {
			i := (k + round) % len(targets) // 0 is direct
			rec := newRecorder()
			var c0 time.Duration
			if i > 0 {
				var err error
				if c0, err = procCPU(pids[i-1]); err != nil {
					return nil, err
				}
			}
			drive(ctx, ld, b.plan.rounds, requester(targets[i], stream, body, nil), rec)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if n := rec.errs.Load(); n > 0 && (i == 0 || i-1 == floorPoolgate) {
				return nil, fmt.Errorf("%s through %s: %d errors, first: %w", title, targets[i].name, n, rec.firstErr)
			}
			if i == 0 {
				direct = rec
				continue
			}
			r.sent[i-1] += rec.ok.Load() + rec.errs.Load()
			r.failed[i-1] += rec.errs.Load()
			if r.firstErr[i-1] == nil {
				r.firstErr[i-1] = rec.firstErr
			}
			c1, err := procCPU(pids[i-1])
			if err != nil {
				return nil, err
			}
			blocks[i-1] = rec
			if n := rec.ok.Load(); n > 0 {
				cpu[i-1] = append(cpu[i-1], float64(c1-c0)/float64(n))
			}
		}
		for i, rec := range blocks {
			h, d := rec.lat, direct.lat
			if stream {
				h, d = rec.ttfb, direct.ttfb
			}
			a50[i] = append(a50[i], float64(added(d, h, 50)))
			a99[i] = append(a99[i], float64(added(d, h, 99)))
		}
	}
	for i := range floorVias {
		r.added50[i] = time.Duration(median(a50[i]))
		r.added99[i] = time.Duration(median(a99[i]))
		r.cpu[i] = time.Duration(median(cpu[i]))
	}
	return r, nil
}

// floorTable is the floor rows as table cells: per workload, added p50 / p99
// and CPU per request through each via.
func floorTable(rows []*floorRow) (head []string, cells [][]string) {
	head = []string{"workload"}
	for _, v := range floorVias {
		head = append(head, v+": added p50 / p99", v+": CPU/req")
	}
	head = append(head, "note")
	for _, r := range rows {
		line := []string{r.title}
		var note []string
		for i := range floorVias {
			line = append(line, fmtDelta(r.added50[i])+" / "+fmtDelta(r.added99[i]), fmtMicros(r.cpu[i]))
			if r.failed[i] > 0 {
				note = append(note, fmt.Sprintf("%s: %d of %d requests failed (first: %v)", floorVias[i], r.failed[i], r.sent[i], r.firstErr[i]))
			}
		}
		cells = append(cells, append(line, strings.Join(note, "; ")))
	}
	return head, cells
}
