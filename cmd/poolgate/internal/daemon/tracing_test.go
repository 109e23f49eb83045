package daemon

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// span is one exported span as the receiver saw it.
type span struct {
	name, trace, id, parent string
	service, replica        string // resource: service.name, service.instance.id
	attrs                   map[string]string
}

// otlpReceiver is a real OTLP/HTTP endpoint on loopback (protobuf, as the
// daemons export it) that keeps every span it receives.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	spans []span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want POST /v1/traces in protobuf", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(req.Body)
		var msg coltrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &msg)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return v.String()
}

func (r *otlpReceiver) add(msg *coltrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range msg.ResourceSpans {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.Key] = value(kv.Value)
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := span{name: s.Name, trace: hex.EncodeToString(s.TraceId), id: hex.EncodeToString(s.SpanId),
					parent: hex.EncodeToString(s.ParentSpanId), service: res["service.name"],
					replica: res["service.instance.id"], attrs: map[string]string{}}
				for _, kv := range s.Attributes {
					sp.attrs[kv.Key] = value(kv.Value)
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
}

// trace returns the spans of one trace received so far.
func (r *otlpReceiver) trace(id string) []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []span
	for _, s := range r.spans {
		if s.trace == id {
			out = append(out, s)
		}
	}
	return out
}

// all returns every span received so far.
func (r *otlpReceiver) all() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]span(nil), r.spans...)
}

func named(spans []span, name string) []span {
	var out []span
	for _, s := range spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

func byID(spans []span, id string) (span, bool) {
	for _, s := range spans {
		if s.id == id {
			return s, true
		}
	}
	return span{}, false
}

// noSecrets fails if any attribute of any span holds one of the texts.
func noSecrets(t *testing.T, spans []span, secrets ...string) {
	t.Helper()
	for _, s := range spans {
		for k, v := range s.attrs {
			for _, sec := range secrets {
				if strings.Contains(v, sec) {
					t.Errorf("span %s attribute %s=%q holds %q", s.name, k, v, sec)
				}
			}
		}
	}
}

// tracingEnv points a daemon's exporter at the receiver, flushing often.
func tracingEnv(r *otlpReceiver, replica string) []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.url, "OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_SERVICE_NAME=poolgate-test", "OTEL_RESOURCE_ATTRIBUTES=service.instance.id=" + replica}
}

// streamChat sends one streamed chat completion with a traceparent and
// reads the stream to its end.
func streamChat(t *testing.T, base, key, traceparent, body string) (http.Header, string) {
	t.Helper()
	h, b, err := tryStreamChat(base, key, traceparent, body)
	if err != nil {
		t.Fatal(err)
	}
	return h, b
}

// tryStreamChat is streamChat for a goroutine of its own, which must not
// call t.Fatal: it returns what went wrong.
func tryStreamChat(base, key, traceparent, body string) (http.Header, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("POST: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return resp.Header, string(b), nil
}

// A streamed chat whose first worker refuses the turn (it was logged out
// since its last health check: the turn never ran there) is retried on the
// other: one trace, continuing the client's traceparent, with the admission
// and one attempt span per worker under the request's span, each naming its
// instance, account, reuse and outcome; the trace id is the request id, and
// is in the access log, the turn line and the request log. No attribute
// holds the prompt or the key. (A worker that dies after it received a turn
// is not a retry: the turn may be what killed it.)
func TestTracingRetryOnRefusingWorker(t *testing.T) {
	rcv := newOTLPReceiver(t)
	const secretKey, secretPrompt = "sk-tracing-secret-4417", "the-prompt-text-9931"
	env := append(simAccounts(2, nil), tracingEnv(rcv, "solo")...)
	// No health check between the two turns: the logged-out worker is
	// still in rotation when the traced turn comes.
	env = append(env, `POOLGATE_API_KEYS=[{"name":"team","key":"`+secretKey+`"}]`, "POOLGATE_ADMIN_TOKEN=adm",
		"POOLGATE_HEALTH_INTERVAL=1h")
	d := daemontest.StartDaemon(t, env...)
	testenv.WaitFor(t, 20*time.Second, "two ready instances", func() bool {
		ready := 0
		for _, in := range poolState(t, d, "adm").Instances {
			if in.State == supervisor.StateReady {
				ready++
			}
		}
		return ready == 2
	})

	// New conversations with the same system prompt go to the same worker
	// (the spread hint): the first turn logs that worker out, the traced
	// one then finds it refusing.
	const system = `{"role":"system","content":"tracing retry"}`
	h, _, err := tryStreamChat(d.URL, secretKey, "", `{"model":"m","stream":true,"messages":[`+system+
		`,{"role":"user","content":"bye [[sim:logout]]"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	victim := h.Get("X-Poolgate-Instance")
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	h, body, err := tryStreamChat(d.URL, secretKey, "00-"+traceID+"-"+clientSpan+"-01", `{"model":"m","stream":true,"messages":[`+
		system+`,{"role":"user","content":"`+secretPrompt+` [[sim:words=5]]"}]}`)
	if err != nil {
		t.Fatalf("the retried stream: %v\npoolgate log:\n%s", err, d.Log())
	}
	if !strings.Contains(body, "data: [DONE]") {
		t.Fatalf("stream did not finish: %s", body)
	}
	if got := h.Get("X-Request-Id"); got != "req_"+traceID {
		t.Errorf("request id %q, want req_ and the trace id", got)
	}
	winner := h.Get("X-Poolgate-Instance")
	if victim == "" || winner == "" || winner == victim {
		t.Fatalf("answered by %q, logged out %q: want the other instance", winner, victim)
	}

	var spans []span
	testenv.WaitForNoError(t, 15*time.Second, "the request's spans exported", func() error {
		spans = rcv.trace(traceID)
		if len(named(spans, "POST /v1/chat/completions")) == 1 && len(named(spans, "poolgate.attempt")) == 2 {
			return nil
		}
		return fmt.Errorf("%d spans so far", len(spans))
	})
	server := named(spans, "POST /v1/chat/completions")[0]
	if server.parent != clientSpan {
		t.Errorf("request span's parent %q, want the client's span %s", server.parent, clientSpan)
	}
	if server.attrs["poolgate.request_id"] != "req_"+traceID || server.attrs["poolgate.key"] != "team" ||
		server.attrs["http.response.status_code"] != "200" {
		t.Errorf("request span attributes %v", server.attrs)
	}
	attempts := named(spans, "poolgate.attempt")
	if attempts[0].attrs["poolgate.attempt"] != "1" {
		attempts[0], attempts[1] = attempts[1], attempts[0]
	}
	want := []struct{ instance, outcome string }{{victim, "not_logged_in"}, {winner, "stop"}}
	for i, a := range attempts {
		if a.parent != server.id {
			t.Errorf("attempt %d's parent %s, want the request span %s", i+1, a.parent, server.id)
		}
		if a.attrs["poolgate.instance"] != want[i].instance || a.attrs["poolgate.account"] != want[i].instance ||
			a.attrs["poolgate.outcome"] != want[i].outcome || a.attrs["poolgate.reused"] != "false" {
			t.Errorf("attempt %d attributes %v, want instance %s, outcome %s, not reused", i+1, a.attrs,
				want[i].instance, want[i].outcome)
		}
	}
	if attempts[1].attrs["poolgate.ttft_ms"] == "" {
		t.Errorf("the answered attempt has no time to first event: %v", attempts[1].attrs)
	}
	if adm := named(spans, "poolgate.admission"); len(adm) != 2 || adm[0].parent != server.id {
		t.Errorf("admission spans %v, want one per attempt under the request", adm)
	}
	noSecrets(t, rcv.all(), secretKey, secretPrompt)

	// One id finds everything: the access line, the turn lines, the
	// request log.
	testenv.WaitFor(t, 5*time.Second, "the access and turn lines", func() bool {
		var access, turn bool
		for _, line := range strings.Split(d.Log(), "\n") {
			if !strings.Contains(line, " trace_id="+traceID) {
				continue
			}
			access = access || strings.Contains(line, "msg=request ")
			turn = turn || strings.Contains(line, "msg=turn ") && strings.Contains(line, "instance="+winner)
		}
		return access && turn
	})
	var reqs admin.RequestsAnswer
	testenv.WaitFor(t, 5*time.Second, "the request log entry", func() bool {
		d.GetJSON(t, "/internal/requests?limit=5", "adm", &reqs)
		return len(reqs.Requests) > 0
	})
	if e := reqs.Requests[0]; e.TraceID != traceID || e.RequestID != "req_"+traceID {
		t.Errorf("request log entry has trace %q, request id %q", e.TraceID, e.RequestID)
	}
}

// A conversation's second turn sent to the replica that does not hold its
// account is forwarded to the holder, and the trace goes on there: the
// holder's request span is the child of the forwarding replica's client
// span, and its attempt continues the upstream session. Redis calls are in
// the trace; no attribute holds the prompt or the cluster token. Both turns
// carry one name of the conversation, on both replicas: in their spans,
// their turn log lines and their request log entries.
func TestTracingAcrossTheHop(t *testing.T) {
	rcv := newOTLPReceiver(t)
	s := startCluster(t, 2, func(i int) []string { return tracingEnv(rcv, fmt.Sprintf("r%d", i+1)) })
	on := s.waitSpread(60 * time.Second)
	const prompt = "hop-prompt-5521"
	first := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	h, answer := streamChat(t, s.replicas[0].URL, "k", "", first)
	firstID := strings.TrimPrefix(h.Get("X-Request-Id"), "req_")
	holder := h.Get("X-Poolgate-Instance")
	if len(on[holder]) != 1 || on[holder][0] != 0 {
		t.Fatalf("first turn served by %q, which is on replicas %v: want replica 1's own", holder, on[holder])
	}
	text := sseText(t, answer)
	second := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + prompt + `"},` +
		`{"role":"assistant","content":` + quote(text) + `},{"role":"user","content":"and then [[sim:whoami]]"}]}`
	h, _ = streamChat(t, s.replicas[1].URL, "k", "", second)
	id := strings.TrimPrefix(h.Get("X-Request-Id"), "req_")
	if h.Get("X-Poolgate-Instance") != holder || len(id) != 32 {
		t.Fatalf("second turn: instance %q request id %q, want %s and a trace id", h.Get("X-Poolgate-Instance"),
			h.Get("X-Request-Id"), holder)
	}

	var spans []span
	testenv.WaitForNoError(t, 15*time.Second, "both replicas' spans exported", func() error {
		spans = rcv.trace(id)
		if len(named(spans, "POST /v1/chat/completions")) == 2 && len(named(spans, "poolgate.attempt")) == 1 {
			return nil
		}
		return fmt.Errorf("%d spans so far", len(spans))
	})
	var entry, held span
	for _, sp := range named(spans, "POST /v1/chat/completions") {
		if sp.replica == "r2" {
			entry = sp
		} else {
			held = sp
		}
	}
	if entry.parent != "" || held.replica != "r1" {
		t.Fatalf("request spans %+v and %+v: want a root on r2 and one on r1", entry, held)
	}
	if held.attrs["poolgate.forwarded_by"] == "" {
		t.Errorf("the holder's request span does not say it was forwarded: %v", held.attrs)
	}
	client, ok := byID(spans, held.parent)
	if !ok || client.replica != "r2" || client.name != "forward POST" {
		t.Fatalf("the holder's request span's parent is %+v, want r2's forward client span", client)
	}
	fwd, ok := byID(spans, client.parent)
	if !ok || fwd.name != "poolgate.forward" || fwd.attrs["poolgate.outcome"] != "forwarded" {
		t.Fatalf("the client span's parent is %+v, want the forward span", fwd)
	}
	if fwd.parent != entry.id {
		t.Errorf("the forward span's parent %s, want r2's request span %s", fwd.parent, entry.id)
	}
	// Both replicas look the conversation up: r2 to find the holder, the
	// holder to continue the session.
	aff := named(spans, "poolgate.affinity")
	for _, a := range aff {
		if a.attrs["poolgate.affinity.hit"] != "true" || a.attrs["poolgate.instance"] != holder {
			t.Errorf("affinity span %+v, want a hit on %s", a, holder)
		}
	}
	if len(aff) != 2 || aff[0].replica == aff[1].replica {
		t.Errorf("affinity spans %v, want one on each replica", aff)
	}
	att := named(spans, "poolgate.attempt")[0]
	if att.replica != "r1" || att.attrs["poolgate.instance"] != holder || att.attrs["poolgate.reused"] != "true" ||
		att.attrs["poolgate.outcome"] != "stop" {
		t.Errorf("attempt on the holder %+v, want %s continuing its session", att, holder)
	}
	redisSpans := 0
	for _, sp := range spans {
		if sp.attrs["db.system"] == "redis" || sp.attrs["db.system.name"] == "redis" {
			redisSpans++
			if _, ok := byID(spans, sp.parent); !ok {
				t.Errorf("redis span %s has no parent in the trace", sp.name)
			}
		}
	}
	if redisSpans == 0 {
		t.Errorf("no Redis call in the trace: %v", spans)
	}
	conversationNamed(t, s, rcv, firstID, aff[0].attrs["poolgate.conversation"], append(aff, att))
	noSecrets(t, rcv.all(), prompt, "and then")
	for _, sp := range rcv.all() {
		for k := range sp.attrs {
			if lk := strings.ToLower(k); strings.Contains(lk, "token") || strings.Contains(lk, "authorization") {
				t.Errorf("span %s records %s", sp.name, k)
			}
		}
	}
}

// conversationNamed checks that the conversation's name, name, is twelve
// hex digits and the same in the second turn's spans (given), the first
// turn's attempt (trace firstID), both turns' `turn` log lines and both
// request log entries.
func conversationNamed(t *testing.T, s *scale, rcv *otlpReceiver, firstID, name string, spans []span) {
	t.Helper()
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(name) {
		t.Fatalf("conversation name %q, want twelve hex digits", name)
	}
	var firstAttempt []span
	testenv.WaitForNoError(t, 15*time.Second, "the first turn's attempt exported", func() error {
		if firstAttempt = named(rcv.trace(firstID), "poolgate.attempt"); len(firstAttempt) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	for _, sp := range append(spans, firstAttempt...) {
		if got := sp.attrs["poolgate.conversation"]; got != name {
			t.Errorf("span %s on %s names the conversation %q, want %q", sp.name, sp.replica, got, name)
		}
	}
	holderLog := s.replicas[0].Log()
	if turns, named := strings.Count(holderLog, "msg=turn"), strings.Count(holderLog, "conversation="+name); turns != 2 || named != 2 {
		t.Errorf("%d turn log lines on the holder, %d naming the conversation %s; want both turns, both named:\n%s",
			turns, named, name, holderLog)
	}
	var reqs admin.RequestsAnswer
	testenv.WaitFor(t, 10*time.Second, "both turns in the request log", func() bool {
		s.replicas[1].GetJSON(t, "/internal/requests?limit=5", "", &reqs)
		return len(reqs.Requests) == 2
	})
	for _, e := range reqs.Requests {
		if e.Conversation != name {
			t.Errorf("request log entry %s names the conversation %q, want %q", e.RequestID, e.Conversation, name)
		}
	}
}

// sseText joins a chat completion stream's content deltas.
func sseText(t *testing.T, body string) string {
	t.Helper()
	var out strings.Builder
	for _, line := range strings.Split(body, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("stream chunk %q: %v", data, err)
		}
		for _, c := range chunk.Choices {
			out.WriteString(c.Delta.Content)
		}
	}
	return out.String()
}

// A login is a trace of its own: one span per attempt naming the instance,
// the account and the result, and never the password.
func TestTracingLogin(t *testing.T) {
	rcv := newOTLPReceiver(t)
	const password = "pw-login-trace-7713"
	env := append(tracingEnv(rcv, "solo"), `POOLGATE_ACCOUNTS=[{"name":"acct-1","username":"alice","password":"`+password+`"}]`,
		"POOLGATE_HEALTH_INTERVAL=300ms")
	d := daemontest.StartDaemon(t, env...)
	waitAllReady(t, d, 1, 90*time.Second) // logged out at start: Chromium logs it in
	var logins []span
	testenv.WaitForNoError(t, 15*time.Second, "the login's span", func() error {
		if logins = named(rcv.all(), "poolgate.login"); len(logins) > 0 {
			return nil
		}
		return fmt.Errorf("no login span among %d", len(rcv.all()))
	})
	l := logins[len(logins)-1]
	if l.parent != "" || l.attrs["poolgate.instance"] != "acct-1" || l.attrs["poolgate.account"] != "acct-1" ||
		l.attrs["poolgate.login.result"] != "success" || l.attrs["poolgate.attempt"] == "" {
		t.Errorf("login span %+v, want a root naming acct-1 and its success", l)
	}
	noSecrets(t, rcv.all(), password, "alice")
}
