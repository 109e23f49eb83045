package route

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/telemetry"
)

// RouterConfig configures routing. Zero fields take the defaults noted.
type RouterConfig struct {
	// DefaultModel serves requests for models the pool doesn't know (default:
	// the first model the pool lists); which names take it is resolve's
	// rule (models.go).
	DefaultModel string
	// DefaultNames are the shell patterns of the unknown names that take
	// the default model in a pool of several kinds; another unknown name
	// is a *chat.UnknownModelError there (default none). In a pool of one
	// kind every unknown name takes it.
	DefaultNames []string
	// Aliases maps client model names to pool model ids (e.g. Claude Code's
	// "claude-sonnet-4-5" to a worker's model key).
	Aliases map[string]string
	// Retries is how many other instances a failed turn is retried on before
	// anything reached the client (config default 2; 0 disables retries).
	Retries int
	// Count counts tokens of a text (required; internal/tokens.Count).
	Count func(string) int
	// Tools is the operator's tool policy (default: every tool is offered).
	Tools ToolPolicy
	// Tracing traces affinity lookups, admission, each attempt and the
	// hop to another replica (nil: off).
	Tracing trace.TracerProvider
	// ConversationKey keys the conversations' names in the turn log, the
	// request log and the spans (names.go): replicas with the same key name
	// a conversation alike (nil: a random key of this process's own).
	ConversationKey []byte
	// CheckTurn refuses a turn larger than every worker accepts (a
	// *chat.TooLargeError); Open asks it, and the bound of each kind the
	// turn may go to (its workers' driver's, worker.TurnChecker), before
	// the affinity lookup and admission, so such a turn costs no slot and
	// no affinity entry (nil: only the kinds' bounds).
	CheckTurn func(*chat.Turn) error
	// Remote locates the other replicas a turn may be handed to (the
	// cluster, forward.go); nil: every turn is served here.
	Remote Remote
	// AgentModels are the model names (lower case) that ask for the
	// worker's agent mode (chat.Turn.Agent) whatever the kind (nil: none).
	AgentModels []string
	// KindAgentModels are each kind's own (worker.Kind.AgentModels), by
	// kind: in a pool of several kinds such a name also routes to its
	// kind's accounts (nil: none).
	KindAgentModels map[string][]string
}

// Router runs one request on the pool: affinity, admission, retries,
// cooldowns, limits and usage.
type Router struct {
	cfg     RouterConfig
	pool    *Pool
	store   AffinityStore
	metrics *metrics.Metrics
	log     *slog.Logger
	wg      sync.WaitGroup
	remote  Remote
	tracer  telemetry.Tracer
	names   *namer
}

// NewRouter returns a router over p. store may be nil (no affinity).
func NewRouter(cfg RouterConfig, p *Pool, store AffinityStore, m *metrics.Metrics, log *slog.Logger) *Router {
	cfg.Retries = max(cfg.Retries, 0)
	return &Router{cfg: cfg, pool: p, store: store, metrics: m, log: log, remote: cfg.Remote,
		tracer: telemetry.New(cfg.Tracing, "github.com/poolgate/poolgate/pool/route"), names: newNamer(cfg.ConversationKey)}
}

// Wait waits for the router's background work (upstream session deletes).
func (r *Router) Wait() { r.wg.Wait() }

// Call is one request as the router takes it: everything the router needs
// to know about it is here, none of it in the context.
type Call struct {
	// API names the public API the request came in on ("chat",
	// "responses", "messages"), for the per-API metrics and the turn log.
	API     string
	Request *chat.Request
	// MayHop says another replica may serve the request: set on a
	// client's request on a clustered replica, never on one another
	// replica forwarded here (one hop at most).
	MayHop bool
	// Capture keeps the newest prompt message and the answer's text in
	// Served (the request log's debug switch).
	Capture bool
}

// Served says how a request was served: the worker that took its turn (the
// last one tried, when every try failed), then the turn's usage.
type Served struct {
	Instance string
	Account  string
	Model    string
	// Conversation names the request's conversation (names.go): the same
	// for all its turns, on every replica with the same key.
	Conversation string
	// FollowUp says the request continues a conversation (it holds an
	// earlier answer); Reused says the turn continued an upstream session.
	FollowUp bool
	Reused   bool
	Usage    chat.Usage
	// TTFT is the time from the request to its answer's first event, 0
	// before one.
	TTFT time.Duration
	// Prompt and Answer are the newest prompt message and the answer's
	// text, kept only when the Call asked to capture them.
	Prompt, Answer string
}

// Started is a started answer as Open hands it on: a chat.Answer that says,
// once it is over, how its request was served (*turnStream is the one).
type Started interface {
	chat.Answer
	Served() Served
}

// Opened is what Open did with a request: the answer it started here, or
// the replica the turn belongs to, and where it ran so far.
type Opened struct {
	// Answer is the started answer, nil when the turn is another
	// replica's or Open failed.
	Answer Started
	// Holder is the URL of the replica that serves the turn instead;
	// nothing was admitted here.
	Holder string
	// Served says where the turn ran so far (after a failure: the last
	// instance tried). A started answer's Served says the rest once it
	// is over.
	Served Served
}

// request is one Open call's routing state.
type request struct {
	*chat.Request
	start    time.Time
	api      string
	model    string
	target   target // where the model's turns may go (models.go)
	owner    string
	mayHop   bool
	capture  bool
	conv     string      // the conversation's name
	turn     chat.Turn   // the whole transcript's turn; an attempt narrows a copy
	hint     uint64      // spreads a new conversation (affinityHint)
	split    int         // index of the newest assistant message, -1 if none
	key      AffinityKey // the affinity entry taken, if any
	hit      Affinity
	hasHit   bool
	reused   bool
	fresh    string // why a follow-up whose entry was found starts a new session ("": it did not)
	excluded []string
	served   Served
	tries    int        // attempts started
	span     trace.Span // the attempt in progress, nil while tracing is off
	began    time.Time  // when it started
}

// Open runs c's request on the pool: affinity, admission, the turn and its
// retries. It returns the answer once it has started (a non-streaming
// answer: once it is whole); the caller reads it on its own goroutine,
// with no goroutine or channel between the worker's connection and the
// caller, and must Close it. An error returned here happened before any
// event reached the caller, after retries. A turn larger than the workers
// accept (RouterConfig.CheckTurn) is refused before anything else, and a
// turn is tried on another instance only when that is safe (retryable): a
// turn whose worker died or went silent after receiving it is not, so one
// request breaks at most one worker.
//
// When c.MayHop and the turn belongs to another replica (that replica
// holds the conversation's upstream session, or no instance here is ready
// while another replica has room), Open returns that replica's URL as
// Opened.Holder, with nothing admitted here: the caller carries the
// request there, and calls Open again without MayHop if it cannot.
func (r *Router) Open(ctx context.Context, c Call) (Opened, error) {
	rq, err := r.newRequest(c)
	if err != nil {
		return Opened{}, err
	}
	req := c.Request
	r.lookup(ctx, rq)
	if rq.conv == "" {
		rq.conv = r.names.name(rq.owner, rq.model, req.Messages)
	}
	rq.served = Served{Model: rq.model, Conversation: rq.conv, FollowUp: rq.split >= 0}
	if holder := r.holder(ctx, rq); holder != "" {
		return Opened{Holder: holder}, nil
	}
	var lastErr error
	// attempts counts turns a worker took; a turn refused by an instance
	// that was already gone (its death not yet noticed: chat.ErrNotSent)
	// or logged out never ran, so it doesn't spend the retry budget, up to one refusal per
	// instance. Tried instances are excluded until every one has been: by
	// then those restarted are new processes, worth another try.
	refused := 0
	for attempts := 0; attempts <= r.cfg.Retries; {
		if len(rq.excluded) > 0 {
			if r.metrics != nil {
				r.metrics.Retries.Inc()
			}
			// The instances tried here went away (their leases lapsed,
			// say): another replica may serve the retry.
			if holder := r.holder(ctx, rq); holder != "" {
				return Opened{Holder: holder, Served: rq.served}, nil
			}
		}
		slot, err := r.acquire(ctx, rq)
		if err != nil {
			r.dropHit(rq)
			if lastErr != nil && errors.Is(err, chat.ErrNoInstance) {
				return Opened{Served: rq.served}, lastErr
			}
			return Opened{Served: rq.served}, err
		}
		out, started, err := r.attempt(ctx, rq, slot)
		if err == nil {
			return Opened{Answer: out, Served: rq.served}, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return Opened{Served: rq.served}, ctx.Err()
		}
		if !retryable(err) {
			r.log.Warn("turn failed before any output, not tried on another instance", "instance", slot.Instance(),
				"err", err, "request_id", req.RequestID)
			return Opened{Served: rq.served}, err
		}
		if started || !(errors.Is(err, chat.ErrNotSent) || errors.Is(err, chat.ErrNotLoggedIn)) {
			attempts++
		} else if refused++; refused > r.pool.sizeFor(&rq.target) {
			attempts++
		}
		r.log.Warn("turn failed before any output, trying another instance",
			"instance", slot.Instance(), "attempts", attempts, "err", err, "request_id", req.RequestID)
		rq.excluded = append(rq.excluded, slot.Instance())
		if len(rq.excluded) >= r.pool.sizeFor(&rq.target) {
			rq.excluded = rq.excluded[:0]
		}
	}
	return Opened{Served: rq.served}, lastErr
}

// newRequest is c's routing state, once the operator's tool policy and the
// workers' size bound let it through.
func (r *Router) newRequest(c Call) (*request, error) {
	req := c.Request
	if err := r.toolPolicy(req); err != nil {
		return nil, err
	}
	t, err := r.resolve(req.Model)
	if err != nil {
		return nil, err
	}
	rq := &request{Request: req, start: time.Now(), api: c.API, model: t.model, target: t,
		owner: req.Owner, split: lastAssistant(req.Messages), mayHop: c.MayHop, capture: c.Capture,
		hint: affinityHint(req)}
	rq.turn = chat.Turn{RequestID: req.RequestID, Model: rq.model, Messages: req.Messages, Tools: req.Tools,
		ToolChoice: req.ToolChoice, MaxTokens: req.MaxTokens, Temperature: req.Temperature, TopP: req.TopP,
		Format: req.Format, Whole: !req.Stream}
	if err := r.kindRules(rq); err != nil {
		return nil, err
	}
	return rq, nil
}

// retryable says whether a turn that failed before any output may be tried
// on another instance. Not a turn no worker would take (too large), nor one
// whose worker went away or fell silent after the turn reached it, even if
// it acknowledged the turn: that shows it parsed the turn, not that it
// survived it (an answer over the gateway's read limit is the worker's
// failure too). A worker going away is retried only when the turn did not
// cause it: it never reached the worker (chat.ErrNotSent), or this replica
// cut it when its lease ended (errFenced). What the worker answered itself
// (a refusal, a rate limit, its own error) is retried.
func retryable(err error) bool {
	var tooLarge *chat.TooLargeError
	switch {
	case errors.As(err, &tooLarge):
		return false
	case errors.Is(err, chat.ErrNotSent), errors.Is(err, errFenced):
		return true
	case errors.Is(err, chat.ErrWorkerGone), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true
}

// toolPolicy applies the operator's tool policy to req.
func (r *Router) toolPolicy(req *chat.Request) error {
	dropped, err := r.cfg.Tools.apply(req)
	if err != nil || len(dropped) == 0 {
		return err
	}
	reason := "allowlist"
	if r.cfg.Tools.Off {
		reason = "forwarding_off"
	}
	if r.metrics != nil {
		r.metrics.ToolsWithheld.WithLabelValues(reason).Add(float64(len(dropped)))
	}
	r.log.Debug("tools withheld by the tool policy", "reason", reason, "tools", dropped, "request_id", req.RequestID)
	return nil
}

// lookup takes the conversation's affinity entry, if any. A one-shot
// request takes none: it quotes a conversation without continuing it.
func (r *Router) lookup(ctx context.Context, rq *request) {
	if r.store == nil || rq.split < 0 || rq.OneShot {
		return
	}
	key := newAffinityKey(rq.owner, keyModel, rq.Messages[:rq.split+1], nil)
	lctx, span := r.tracer.Start(ctx, telemetry.SpanAffinity)
	a, err := r.store.TakeAffinity(lctx, key)
	// The entry knows the conversation's name: a follow-up that finds
	// its session does not hash its opening again.
	if rq.conv = a.Conv; err != nil || rq.conv == "" {
		rq.conv = r.names.name(rq.owner, rq.model, rq.Messages)
	}
	endAffinitySpan(span, rq.conv, a, err)
	if err != nil {
		if r.metrics != nil {
			r.metrics.CacheMisses.Inc()
		}
		return
	}
	if r.modelMoved(ctx, rq, key, a) {
		return
	}
	rq.key, rq.hit, rq.hasHit = key, a, true
}

// dropHit forgets an affinity entry that can't be used and frees its
// upstream session, best effort.
func (r *Router) dropHit(rq *request) {
	if !rq.hasHit {
		return
	}
	rq.hasHit = false
	if r.metrics != nil {
		r.metrics.CacheInvalidated.Inc()
	}
	r.DeleteSession(rq.hit)
	rq.hit = Affinity{}
}

// DeleteSession frees an upstream session on its worker in the background,
// best effort (used for invalidated and evicted affinity entries).
func (r *Router) DeleteSession(a Affinity) {
	if a.SessionID == "" {
		return
	}
	del := r.pool.sessionHolder(a)
	if del == nil || !del.Capabilities().Sessions {
		return
	}
	r.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := del.DeleteSession(ctx, a.SessionID); err != nil {
			r.log.Debug("delete upstream session", "instance", a.Instance, "err", err)
		}
	})
}

// attempt runs the turn on slot. It returns an error (slot released) if the
// turn failed before its first event, and whether the worker had taken the
// turn; a non-streaming turn is buffered whole and fails here on any error.
func (r *Router) attempt(ctx context.Context, rq *request, slot *turnSlot) (*turnStream, bool, error) {
	turn := new(chat.Turn)
	*turn = rq.turn
	rq.reused = false
	if rq.hasHit {
		if !r.hitFits(rq, slot, turn) {
			r.dropHit(rq)
		} else if rq.hit.SessionID != "" {
			turn.SessionID = rq.hit.SessionID
			turn.Messages = rq.Messages[rq.split+1:]
			rq.reused = true
		}
	}
	rq.served = Served{Instance: slot.Instance(), Account: slot.m.account, Model: rq.model, Conversation: rq.conv,
		FollowUp: rq.split >= 0, Reused: rq.reused}
	r.startAttempt(ctx, rq, slot)
	tctx, cancel := withFence(ctx, slot) // the turn ends with the lease it runs under
	src, err := slot.Backend.Start(tctx, turn)
	if err != nil {
		err = fenced(tctx, err)
		cancel()
		r.failed(rq, slot, err)
		r.endAttempt(rq, failureOutcome(err), err)
		return nil, false, err
	}
	// The events are handled as they come until the answer is handed on:
	// a non-streaming answer whole, a stream from its first event on (the
	// caller reads the rest). An error before then fails the attempt, to
	// be retried.
	st := &turnStream{src: src, cancel: cancel}
	st.q = chat.QueueIn(st.qbuf[:])
	st.f = forwarding{r: r, ctx: tctx, rq: rq, slot: slot, q: &st.q, lim: newLimiter(rq.Stop, rq.MaxTokens, r.cfg.Count)}
	for first := true; ; first = false {
		ev, ok := src.Next()
		if !ok {
			ev = chat.Event{Type: chat.EventError, Err: chat.ErrWorkerGone}
		}
		if ev.Type == chat.EventError {
			ev.Err = fenced(tctx, ev.Err)
			src.Close()
			cancel()
			r.failed(rq, slot, ev.Err)
			r.endAttempt(rq, failureOutcome(ev.Err), ev.Err)
			return nil, true, ev.Err
		}
		if first {
			ttft := time.Since(rq.start)
			if r.metrics != nil && rq.api != "" {
				r.metrics.ForAPI(rq.api).TTFT.Observe(ttft.Seconds())
			}
			rq.served.TTFT = ttft
			firstEvent(rq)
			if rq.reused && r.metrics != nil {
				r.metrics.CacheHits.Inc()
			}
		}
		if st.f.handle(ev) {
			st.end()
			break
		}
		if rq.Stream {
			break
		}
	}
	return st, true, nil
}

// sessionKeeper is a backend whose policy says which turns may continue
// an upstream session (a driver's reuse setting): a conversation
// whose next turn is of another kind starts a new session with its whole
// transcript. A backend without one continues every session it handed out.
type sessionKeeper interface {
	Continues(t *chat.Turn) bool
}

func continues(b any, t *chat.Turn) bool {
	k, ok := b.(sessionKeeper)
	return !ok || k.Continues(t)
}

// failed handles a turn that failed before any output.
func (r *Router) failed(rq *request, slot *turnSlot, err error) {
	slot.release()
	if rq.reused || (rq.hasHit && rq.hit.Instance == slot.Instance()) {
		r.dropHit(rq)
	}
	var rl *chat.RateLimitedError
	switch {
	case errors.As(err, &rl):
		d := slot.pool.coolDown(slot.m, rl.RetryAfter)
		r.log.Warn("upstream rate limit, cooling instance down", "instance", slot.Instance(), "for", d)
	case errors.Is(err, chat.ErrNotLoggedIn), errors.Is(err, chat.ErrWorkerGone):
		slot.m.w.Check()
	}
}

// forwarding is one answer on its way to the caller: stop sequences and
// the token cap are enforced, and the conversation's affinity is written back
// after a clean finish.
type forwarding struct {
	r     *Router
	ctx   context.Context
	rq    *request
	slot  *turnSlot
	q     *chat.Queue // what the caller has yet to take
	lim   *limiter
	text  strings.Builder
	calls []chat.ToolCall
	// put is the affinity entry a clean finish leaves to write back once
	// the caller closes the answer (the zero value: none).
	put affinityPut
}

// affinityPut is an affinity entry to write back.
type affinityPut struct {
	key AffinityKey // "": none
	a   Affinity
}

// writeBack writes the entry a clean finish left, once: when the caller
// closes the answer, before the turn's slot is freed (turnStream.Close), so
// that a drain or a handover of the instance, which waits for its slots,
// comes after it. A stream's caller closes it after its last event went
// out, which must not wait for the store (a slow Redis takes up to the
// second it is given); the response ends after it, so a follow-up sent once
// the response is over finds the entry. A whole answer's caller closes it
// before writing its one body (relay.Collect). Detached from the request:
// the answer is complete even if the client went away since.
func (f *forwarding) writeBack() {
	p := f.put
	if p.key == "" {
		return
	}
	f.put = affinityPut{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := f.r.store.PutAffinity(ctx, p.key, p.a); err != nil {
		f.r.log.Debug("affinity write-back failed", "err", err)
	}
}

func (f *forwarding) send(ev chat.Event) { f.q.Push(ev) }

// cancelled ends an answer whose caller went away.
func (f *forwarding) cancelled() {
	if f.rq.reused || f.rq.hasHit {
		f.r.dropHit(f.rq)
	}
	f.r.logTurn(f.rq, f.slot, "cancelled", nil)
}

// handle forwards one event; done says the answer is over.
func (f *forwarding) handle(ev chat.Event) (done bool) {
	r, rq, slot := f.r, f.rq, f.slot
	switch ev.Type {
	case chat.EventText:
		emit, stop, reason, seq := f.lim.text(ev.Text)
		if emit != "" {
			f.text.WriteString(emit)
			f.send(chat.Event{Type: chat.EventText, Text: emit})
		}
		if stop {
			// The client's answer ends here while the upstream session
			// holds more: it can't be continued, so it is not written back.
			f.finish(chat.Event{Type: chat.EventDone, Finish: reason, StopSequence: seq}, false)
			return true
		}
	case chat.EventToolCall:
		f.calls = append(f.calls, ev.ToolCall)
		f.send(ev)
	case chat.EventDone:
		if rest := f.lim.flush(); rest != "" {
			f.text.WriteString(rest)
			f.send(chat.Event{Type: chat.EventText, Text: rest})
		}
		f.finish(ev, true)
		return true
	case chat.EventError:
		r.failed(rq, slot, ev.Err)
		r.logTurn(rq, slot, "error", ev.Err)
		f.send(ev)
		return true
	}
	return false
}

// finish completes usage, leaves the affinity entry to write back (when
// keep; writeBack) and sends done.
func (f *forwarding) finish(done chat.Event, keep bool) {
	r, rq, slot, text, calls := f.r, f.rq, f.slot, f.text.String(), f.calls
	if done.Usage.OutputTokens == 0 && r.cfg.Count != nil {
		done.Usage.OutputTokens = r.cfg.Count(text)
		for _, c := range calls {
			done.Usage.OutputTokens += r.cfg.Count(c.Name) + r.cfg.Count(c.Arguments)
		}
	}
	if done.Usage.InputTokens == 0 && r.cfg.Count != nil {
		done.Usage.InputTokens = chat.PromptTokens(rq.Messages, r.cfg.Count)
	}
	if done.Finish == "" {
		done.Finish = chat.FinishStop
		if len(calls) > 0 {
			done.Finish = chat.FinishToolCalls
		}
	}
	rq.served.Usage = done.Usage
	if rq.capture && len(rq.Messages) > 0 {
		rq.served.Prompt, rq.served.Answer = rq.Messages[len(rq.Messages)-1].Content, text
	}
	if r.metrics != nil {
		r.metrics.CountTokens(done.Usage.InputTokens, done.Usage.OutputTokens)
	}
	sessionID := done.SessionID
	switch {
	case !keep, r.store == nil, rq.OneShot:
		// Nobody continues this session: a stopped answer, a one-shot
		// request, or session reuse is off.
		r.DeleteSession(Affinity{Instance: slot.Instance(), SessionID: sessionID})
	default:
		answer := chat.Message{Role: chat.RoleAssistant, Content: text, ToolCalls: calls}
		f.put = affinityPut{key: newAffinityKey(rq.owner, keyModel, rq.Messages, &answer),
			a: Affinity{Instance: slot.Instance(), SessionID: sessionID, Model: rq.model, Kind: slot.m.kind,
				At: time.Now().UnixMilli(), Conv: rq.conv}}
	}
	if rq.split >= 0 {
		slot.m.followUp(rq.reused)
	}
	slot.pool.turnOK(slot.m)
	r.logTurn(rq, slot, string(done.Finish), nil)
	f.send(done)
}
