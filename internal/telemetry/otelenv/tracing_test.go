package otelenv

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/telemetry"
)

// FromEnv reads only the standard OTEL_* variables: on with an endpoint
// unless the exporter is none, and a clear error for what it cannot do.
func TestTracingFromEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		on      bool
		wantErr string
	}{
		{"nothing set", nil, false, ""},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, ""},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://otel.example/v1/traces"}, true, ""},
		{"exporter none wins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
			"OTEL_TRACES_EXPORTER": "none"}, false, ""},
		{"sampler and headers", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25",
			"OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b,x=y", "OTEL_BSP_SCHEDULE_DELAY": "200"}, true, ""},
		{"grpc refused", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "http/protobuf"},
		{"other exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "otlp or none"},
		{"not a URL", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, false, "http:// or https://"},
		{"bad sampler", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_TRACES_SAMPLER": "sometimes"},
			false, "OTEL_TRACES_SAMPLER"},
		{"bad ratio", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_TRACES_SAMPLER": "traceidratio",
			"OTEL_TRACES_SAMPLER_ARG": "2"}, false, "ratio"},
		{"bad header", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"},
			false, "OTEL_EXPORTER_OTLP_HEADERS"},
		{"bad delay", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_BSP_SCHEDULE_DELAY": "soon"},
			false, "OTEL_BSP_SCHEDULE_DELAY"},
		// The errors never show a secret of the collector's.
		{"a header without =", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318",
			"OTEL_EXPORTER_OTLP_HEADERS": "x=y,Authorization: Bearer s3cr3t-Zq"}, false, "entry 2 is not key=value"},
		{"a header with a bare %", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318",
			"OTEL_EXPORTER_OTLP_HEADERS": "api-key=s3cr3t-Zq%zz"}, false, `"api-key" is not URL-encoded`},
		{"an endpoint without a host", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://u:s3cr3t-Zq@"}, false,
			"https://REDACTED@"},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, stop, err := FromEnv(func(k string) string { return tt.env[k] }, log)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "s3cr3t") {
					t.Fatalf("err = %v, want one saying %q and showing no secret", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = stop(context.Background()) }()
			if telemetry.Enabled(tp) != tt.on {
				t.Errorf("tracing on = %v, want %v", telemetry.Enabled(tp), tt.on)
			}
		})
	}
}
