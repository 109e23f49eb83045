// Package otelenv sets up OpenTelemetry's SDK for the daemon: the tracer
// provider and its OTLP exporter from the standard OTEL_* environment, and the
// tracing of Redis calls. It is apart from internal/telemetry, which every
// package that traces imports, so that only the daemon links the SDK and the
// exporter: the packages see the trace API alone.
package otelenv

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/poolgate/poolgate/internal/redact"
	"github.com/poolgate/poolgate/internal/telemetry"
)

// FromEnv builds the tracer provider from the standard OTEL_* variables
// (docs/observability.md lists those read). Tracing is on when an OTLP
// endpoint is set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
// OTEL_EXPORTER_OTLP_ENDPOINT) and OTEL_TRACES_EXPORTER is not "none";
// off, the provider is a no-op and every package skips its spans. The
// returned func flushes and stops the exporter.
func FromEnv(getenv func(string) string, log *slog.Logger) (trace.TracerProvider, func(context.Context) error, error) {
	off := func(context.Context) error { return nil }
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return noop.NewTracerProvider(), off, nil
	case "", "otlp":
	default:
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: poolgate exports traces with otlp or none", exp)
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		if base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); base != "" {
			endpoint = strings.TrimRight(base, "/") + "/v1/traces"
		}
	}
	if endpoint == "" {
		return noop.NewTracerProvider(), off, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("OTLP traces endpoint %q: want an http:// or https:// URL", redact.URL(endpoint))
	}
	signal := func(name string) string { // the traces-specific variable, else the general one
		if v := getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
			return v
		}
		return getenv("OTEL_EXPORTER_OTLP_" + name)
	}
	if p := signal("PROTOCOL"); p != "" && p != "http/protobuf" {
		return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: poolgate exports OTLP over http/protobuf "+
			"(a collector, Jaeger and Tempo all take it on port 4318)", p)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(endpoint)}
	if h := signal("HEADERS"); h != "" {
		headers, err := keyValues(h)
		if err != nil {
			return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %w", err)
		}
		opts = append(opts, otlptracehttp.WithHeaders(headers))
	}
	if t := signal("TIMEOUT"); t != "" {
		ms, err := strconv.Atoi(t)
		if err != nil || ms <= 0 {
			return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_TIMEOUT=%q: want milliseconds", t)
		}
		opts = append(opts, otlptracehttp.WithTimeout(time.Duration(ms)*time.Millisecond))
	}
	switch c := signal("COMPRESSION"); c {
	case "gzip":
		opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	case "", "none":
		opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.NoCompression))
	default:
		return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_COMPRESSION=%q: want gzip or none", c)
	}
	sampler, err := samplerOf(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return nil, nil, err
	}
	bsp, err := batchOptions(getenv)
	if err != nil {
		return nil, nil, err
	}
	attrs, err := keyValues(getenv("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return nil, nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	if name := getenv("OTEL_SERVICE_NAME"); name != "" {
		attrs["service.name"] = name
	} else if attrs["service.name"] == "" {
		attrs["service.name"] = "poolgate"
	}
	if _, ok := attrs["host.name"]; !ok {
		if h, err := os.Hostname(); err == nil {
			attrs["host.name"] = h // tells replicas apart
		}
	}
	var kvs []attribute.KeyValue
	for k, v := range attrs {
		kvs = append(kvs, attribute.String(k, v))
	}
	exporter, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	// An unreachable collector must not flood the log: the SDK reports each
	// failed export, and the requests go on regardless.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Debug("tracing", "err", err) }))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler),
		sdktrace.WithResource(resource.NewSchemaless(kvs...)),
		sdktrace.WithBatcher(exporter, bsp...))
	log.Info("tracing on", "endpoint", u.Scheme+"://"+u.Host+u.Path)
	return tp, tp.Shutdown, nil
}

// keyValues parses the k=v,k=v lists of OTEL_RESOURCE_ATTRIBUTES and
// OTEL_EXPORTER_OTLP_HEADERS (values URL-encoded). Its errors name an
// entry by its place or key, never its value: a header's value is often a
// collector's token.
func keyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	for i, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("entry %d is not key=value", i+1)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("the value of %q is not URL-encoded (a '%%' must be %%25)", k)
		}
		out[k] = dv
	}
	return out, nil
}

// samplerOf is the sampler OTEL_TRACES_SAMPLER names (default
// parentbased_always_on: a client's sampled traceparent is followed).
func samplerOf(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio or their parentbased_ forms", name)
}

// batchOptions reads the batch span processor's OTEL_BSP_* variables.
func batchOptions(getenv func(string) string) ([]sdktrace.BatchSpanProcessorOption, error) {
	var out []sdktrace.BatchSpanProcessorOption
	for _, v := range []struct {
		name string
		set  func(int) sdktrace.BatchSpanProcessorOption
	}{
		{"OTEL_BSP_SCHEDULE_DELAY", func(n int) sdktrace.BatchSpanProcessorOption {
			return sdktrace.WithBatchTimeout(time.Duration(n) * time.Millisecond)
		}},
		{"OTEL_BSP_EXPORT_TIMEOUT", func(n int) sdktrace.BatchSpanProcessorOption {
			return sdktrace.WithExportTimeout(time.Duration(n) * time.Millisecond)
		}},
		{"OTEL_BSP_MAX_QUEUE_SIZE", sdktrace.WithMaxQueueSize},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", sdktrace.WithMaxExportBatchSize},
	} {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s=%q: want a positive integer", v.name, s)
		}
		out = append(out, v.set(n))
	}
	return out, nil
}

// TraceRedis adds the client's calls to the traces of the requests and
// logins that make them (never a trace per background tick). Commands'
// arguments are never recorded: they hold conversation keys and stored
// answers.
func TraceRedis(client redis.UniversalClient, tp trace.TracerProvider) error {
	if !telemetry.Enabled(tp) {
		return nil
	}
	return redisotel.InstrumentTracing(client, redisotel.WithTracerProvider(telemetry.ChildrenOnly(tp)),
		redisotel.WithDBStatement(false), redisotel.WithCallerEnabled(false))
}
