package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
)

// whoami is the simulator's answer to [[sim:whoami]].
type whoami struct {
	session  string
	turn     int
	reply    bool
	sections int
}

var whoamiRE = regexp.MustCompile(`^session=(\S+) turn=(\d+) reply=(true|false) sections=(\d+) chars=\d+$`)

func parseWhoami(t *testing.T, s string) whoami {
	t.Helper()
	m := whoamiRE.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("not a whoami answer: %q", s)
	}
	turn, _ := strconv.Atoi(m[2])
	sections, _ := strconv.Atoi(m[4])
	return whoami{session: m[1], turn: turn, reply: m[3] == "true", sections: sections}
}

// conversation drives one chat through the SDK, keeping the transcript.
type conversation struct {
	client openai.Client
	msgs   []openai.ChatCompletionMessageParamUnion
	served *tally // counts the answers and their tokens (nil: not counted)
}

// tally counts turns answered and their tokens, as the clients saw them.
type tally struct{ turns, input, output atomic.Int64 }

func (c *conversation) say(ctx context.Context, text string) (string, error) {
	c.msgs = append(c.msgs, openai.UserMessage(text))
	resp, err := c.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "dashscope_qwen3_coder", Messages: c.msgs})
	if err != nil {
		return "", err
	}
	if c.served != nil {
		c.served.turns.Add(1)
		c.served.input.Add(resp.Usage.PromptTokens)
		c.served.output.Add(resp.Usage.CompletionTokens)
	}
	answer := resp.Choices[0].Message.Content
	c.msgs = append(c.msgs, openai.AssistantMessage(answer))
	return answer, nil
}

func scrape(t *testing.T, d *daemontest.Daemon, name string) float64 {
	t.Helper()
	resp, err := http.Get(d.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	t.Fatalf("metric %s not exported", name)
	return 0
}

func affinityDaemon(t *testing.T, env ...string) *daemontest.Daemon {
	env = append(env, "POOLGATE_API_KEYS=sk-1,sk-2", "POOLGATE_METRICS_PUBLIC=true", "POOLGATE_ADMIN_TOKEN=adm")
	d := daemontest.StartDaemon(t, env...)
	d.WaitReady(t, 15*time.Second)
	return d
}

func testAffinity(t *testing.T, d *daemontest.Daemon) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hits0 := scrape(t, d, "poolgate_session_cache_hits_total")
	followUps0, reused0 := scrapeSum(t, d, "poolgate_follow_ups_total"), scrapeSum(t, d, "poolgate_follow_ups_reused_total")

	c := &conversation{client: sdk(d, "sk-1")}
	var first whoami
	for turn := 1; turn <= 3; turn++ {
		a, err := c.say(ctx, fmt.Sprintf("[[sim:whoami]] turn %d", turn))
		if err != nil {
			t.Fatal(err)
		}
		w := parseWhoami(t, a)
		if turn == 1 {
			first = w
			continue
		}
		if w.session != first.session || w.turn != turn || !w.reply || w.sections != 1 {
			t.Errorf("turn %d: %+v, want session %s turn %d as a reply carrying one section", turn, w, first.session, turn)
		}
	}
	if hits := scrape(t, d, "poolgate_session_cache_hits_total") - hits0; hits != 2 {
		t.Errorf("cache hits rose by %v over two reused turns, want exactly 2", hits)
	}

	// An edited first turn is another conversation: a fresh session.
	edited := &conversation{client: c.client, msgs: append([]openai.ChatCompletionMessageParamUnion{
		openai.UserMessage("[[sim:whoami]] turn 1 (edited)")}, c.msgs[1:2]...)}
	a, err := edited.say(ctx, "[[sim:whoami]] turn 2")
	if err != nil {
		t.Fatal(err)
	}
	if w := parseWhoami(t, a); w.reply || w.session == first.session {
		t.Errorf("edited history reused %+v", w)
	}

	// The same transcript under another API key never shares the session.
	other := &conversation{client: sdk(d, "sk-2"), msgs: append([]openai.ChatCompletionMessageParamUnion(nil), c.msgs[:2]...)}
	a, err = other.say(ctx, "[[sim:whoami]] turn 2")
	if err != nil {
		t.Fatal(err)
	}
	if w := parseWhoami(t, a); w.reply || w.session == first.session {
		t.Errorf("another key reused the session: %+v", w)
	}

	// Regenerating a turn (the same prefix again) must not continue the
	// session that already holds the first answer to it.
	regen := &conversation{client: c.client, msgs: append([]openai.ChatCompletionMessageParamUnion(nil), c.msgs[:len(c.msgs)-2]...)}
	a, err = regen.say(ctx, "[[sim:whoami]] turn 3")
	if err != nil {
		t.Fatal(err)
	}
	if w := parseWhoami(t, a); w.reply && w.session == first.session {
		t.Errorf("a regenerated turn continued the session that already answered it: %+v", w)
	}

	// Five follow-ups, of which the first conversation's two continued
	// their session; per account, the counter pair says the same.
	followUps, reused := scrapeSum(t, d, "poolgate_follow_ups_total")-followUps0, scrapeSum(t, d, "poolgate_follow_ups_reused_total")-reused0
	if followUps != 5 || reused != 2 {
		t.Errorf("follow-ups counted %v, reused %v; want 5 and 2", followUps, reused)
	}
	// The request log names each request's conversation: the three turns
	// and the regenerated one alike, the edited and the other key's apart.
	var reqs admin.RequestsAnswer
	testenv.WaitFor(t, 10*time.Second, "the six requests in the request log", func() bool {
		d.GetJSON(t, "/internal/requests?limit=6", "adm", &reqs)
		return len(reqs.Requests) == 6
	})
	names := make([]string, 6) // oldest first: turns 1-3, edited, other key, regenerated
	for i, e := range reqs.Requests {
		names[5-i] = e.Conversation
	}
	if names[0] == "" || names[1] != names[0] || names[2] != names[0] || names[5] != names[0] ||
		names[3] == names[0] || names[4] == names[0] || names[4] == names[3] {
		t.Errorf("conversation names %q, want turns 1-3 and the regenerated turn alike, the edited and the other key's apart", names)
	}
}

// scrapeSum sums every series of the metric name.
func scrapeSum(t *testing.T, d *daemontest.Daemon, name string) float64 {
	t.Helper()
	resp, err := http.Get(d.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum, seen := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+"{"); ok {
			_, v, _ := strings.Cut(rest, "} ")
			f, _ := strconv.ParseFloat(v, 64)
			sum, seen = sum+f, true
		}
	}
	if !seen {
		t.Fatalf("metric %s not exported (its series are made for every account)", name)
	}
	return sum
}

func TestAffinityInMemory(t *testing.T) {
	testAffinity(t, affinityDaemon(t))
}

func TestAffinityOnRedis(t *testing.T) {
	r := testenv.Redis(t)
	testAffinity(t, affinityDaemon(t, "POOLGATE_REDIS_URL="+r.URL()))
}

func TestConcurrentTurnsOnOneConversation(t *testing.T) {
	d := affinityDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := &conversation{client: sdk(d, "sk-1")}
	if _, err := base.say(ctx, "[[sim:whoami]] start"); err != nil {
		t.Fatal(err)
	}
	// Two follow-ups of the same prefix at once: at most one may continue the
	// upstream session; the other gets a fresh one with the whole transcript.
	var wg sync.WaitGroup
	var replies atomic.Int32
	for i := range 2 {
		wg.Go(func() {
			c := &conversation{client: base.client, msgs: append([]openai.ChatCompletionMessageParamUnion(nil), base.msgs...)}
			a, err := c.say(ctx, fmt.Sprintf("[[sim:whoami]] [[sim:delay=300ms]] branch %d", i))
			if err != nil {
				t.Error(err)
				return
			}
			if parseWhoami(t, a).reply {
				replies.Add(1)
			}
		})
	}
	wg.Wait()
	if n := replies.Load(); n > 1 {
		t.Errorf("%d concurrent turns continued one upstream session", n)
	}
}

func TestFlushAffinity(t *testing.T) {
	d := affinityDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := &conversation{client: sdk(d, "sk-1")}
	if _, err := c.say(ctx, "[[sim:whoami]] one"); err != nil {
		t.Fatal(err)
	}
	flush := func(body string) int {
		req, _ := http.NewRequest(http.MethodDelete, d.URL+"/internal/session/affinity", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer adm")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := flush(`{"api_key":"sk-2"}`); code != http.StatusOK {
		t.Fatalf("flush other key: %d", code)
	}
	a, err := c.say(ctx, "[[sim:whoami]] two")
	if err != nil {
		t.Fatal(err)
	}
	if !parseWhoami(t, a).reply {
		t.Error("flushing another key's entries broke this conversation")
	}
	if code := flush(""); code != http.StatusOK {
		t.Fatalf("flush all: %d", code)
	}
	a, err = c.say(ctx, "[[sim:whoami]] three")
	if err != nil {
		t.Fatal(err)
	}
	if parseWhoami(t, a).reply {
		t.Error("a flushed conversation still reused its session")
	}
	if code := flush(`{"api_key":`); code != http.StatusBadRequest {
		t.Errorf("malformed flush body: %d, want 400", code)
	}
}

func TestRedisRestartCostsNoRequest(t *testing.T) {
	r := testenv.Redis(t)
	d := affinityDaemon(t, "POOLGATE_REDIS_URL="+r.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var failed atomic.Int32
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 3 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				c := &conversation{client: sdk(d, "sk-1")}
				for turn := range 2 {
					if _, err := c.say(ctx, fmt.Sprintf("[[sim:whoami]] client %d conv %d turn %d", i, n, turn)); err != nil {
						failed.Add(1)
						t.Errorf("request failed during the Redis restart: %v", err)
					}
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	r.Kill()
	time.Sleep(1500 * time.Millisecond)
	r.Restart()
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d requests failed", failed.Load())
	}
	// Reuse works again once Redis is back.
	c := &conversation{client: sdk(d, "sk-1")}
	if _, err := c.say(ctx, "[[sim:whoami]] after"); err != nil {
		t.Fatal(err)
	}
	a, err := c.say(ctx, "[[sim:whoami]] after 2")
	if err != nil {
		t.Fatal(err)
	}
	if !parseWhoami(t, a).reply {
		t.Error("no session reuse after Redis came back")
	}
	if n := strings.Count(d.Log(), "redis unavailable"); n != 1 {
		t.Errorf("the outage was logged %d times, want once", n)
	}
	if !strings.Contains(d.Log(), "redis reachable again") {
		t.Error("the recovery was not logged")
	}
}

func sdkURL(base string) openai.Client {
	return openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))
}

func jsonDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
