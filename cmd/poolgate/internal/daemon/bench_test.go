package daemon

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/testenv"
)

// BenchmarkRequestPath is the allocation budget of one request through the
// whole gateway, wired as the daemon wires it: the public engine (middleware,
// key check, accounting with usage and the request log, the protocol's
// decode and encode), the relay, the router with affinity in memory, the
// pool and the openai driver, against a simulated OpenAI-compatible worker
// process over loopback. Only the inbound connection is left out: requests
// go straight to the engine's ServeHTTP, so allocs/op is the gateway's own
// budget per request (docs/benchmarks.md lists it beside the end-to-end
// figures). Run it with
//
//	make build && POOLGATE_TEST_BIN=$PWD/bin/poolgate go test ./internal/daemon -run '^$' -bench RequestPath -benchmem
//
// The rows named "traced" run with tracing on: every span exported over
// OTLP/HTTP to a receiver on loopback that discards them.
func BenchmarkRequestPath(b *testing.B) {
	tests := []struct {
		name string
		body string
	}{
		{"non-stream", `{"model":"m","messages":[{"role":"user","content":"bench"}]}`},
		{"stream 100 events", `{"model":"m","stream":true,"messages":[{"role":"user","content":"bench [[sim:chunks=100]]"}]}`},
	}
	for _, traced := range []bool{false, true} {
		var env []string
		suffix := ""
		if traced {
			env, suffix = []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlpSink(b)}, " traced"
		}
		h := benchGateway(b, env...)
		for _, tt := range tests {
			b.Run(tt.name+suffix, func(b *testing.B) {
				body := []byte(tt.body)
				b.ReportAllocs()
				for b.Loop() {
					req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
					req.Host = "127.0.0.1:8080" // this gateway by a loopback name, as the guard without keys wants
					req.Header.Set("Content-Type", "application/json")
					w := &benchWriter{h: http.Header{}}
					h.ServeHTTP(w, req)
					if w.code != http.StatusOK {
						b.Fatalf("status %d", w.code)
					}
				}
			})
		}
	}
}

// otlpSink is an OTLP/HTTP endpoint on loopback that takes every export
// and keeps nothing; it returns its URL.
func otlpSink(b *testing.B) string {
	b.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty body is an empty ExportTraceServiceResponse
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

// benchGateway builds the daemon with one openai-driver account on the
// simulator and waits until it is ready.
func benchGateway(b *testing.B, env ...string) http.Handler {
	b.Helper()
	bin := testenv.PoolgateBin(b)
	environ := append([]string{"POOLGATE_DRIVER=openai", "POOLGATE_DATA_DIR=" + b.TempDir(), "POOLGATE_LOG_LEVEL=warn",
		"POOLGATE_INSTANCE_MAX_IN_FLIGHT=64", `POOLGATE_ACCOUNTS=[{"name":"bench-1","username":"u","password":"p"}]`,
		"POOLGATE_WORKER_BIN=" + bin}, env...)
	cfg, _, err := config.Load("", environ)
	if err != nil {
		b.Fatal(err)
	}
	cfg.WorkerBin = bin
	cfg.WorkerArgs = []string{"simworker", "start", "--protocol=openai", "--port={port}", "--workDir={workdir}"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := build(cfg, log, environ)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.sup.Start(ctx)
	b.Cleanup(func() {
		grace, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		a.pool.Shutdown(grace)
		a.sup.Shutdown()
		a.launcher.Close()
		cancel()
		a.router.Wait()
		_ = a.store.Close()
		_ = a.stopTracing(grace)
	})
	testenv.WaitFor(b, 20*time.Second, "the simulated worker to be ready", func() bool {
		ok, _ := a.pool.Ready()
		return ok
	})
	return a.api.Handler
}

// benchWriter is a ResponseWriter that keeps only the status, so the
// benchmark counts the gateway's allocations, not a recorder's.
type benchWriter struct {
	h    http.Header
	code int
}

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}
func (w *benchWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *benchWriter) Flush() {}

// SetWriteDeadline is supported, as by net/http's own writer.
func (w *benchWriter) SetWriteDeadline(time.Time) error { return nil }
