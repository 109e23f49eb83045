// Package live keeps the last hour of the gateway's traffic in memory for
// the dashboard: per time step, the requests by outcome, latency and time
// to first token as small histograms (for p50/p95), the follow-up turns and
// how many continued their upstream session, and the queue depth and turns
// in flight as sampled; once for the whole gateway and once per account. Every series is a ring of fixed size allocated once, so memory
// stays bounded however long the process runs, and recording a request is
// one lock and a few increments. It knows nothing of HTTP or workers.
package live

import (
	"math"
	"sort"
	"sync"
	"time"
)

// Outcomes a request is counted under.
const (
	OK       = iota // answered
	Rejected        // 429: a key's limit or a full queue
	Client          // another 4xx
	Failed          // 5xx, or an answer that failed mid-stream
	outcomes
)

// OutcomeNames are the outcomes' names in a View, by index.
var OutcomeNames = [outcomes]string{"ok", "rejected", "client_error", "error"}

// bounds are the upper bounds (ms) of the duration histograms' buckets; one
// more bucket holds everything longer.
var bounds = [...]float64{10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 300000}

const nbuckets = len(bounds) + 1

// Outcome classifies a finished request by its status and whether its
// answer failed after the status went out.
func Outcome(status int, failed bool) int {
	switch {
	case status == 429:
		return Rejected
	case status >= 500 || (status < 400 && failed):
		return Failed
	case status >= 400:
		return Client
	}
	return OK
}

type step struct {
	at       int64 // which step (unix time / step) the counts are of; 0: none
	n        [outcomes]uint32
	followUp uint32 // follow-up turns answered
	reused   uint32 // of them, those that continued their upstream session
	latency  [nbuckets]uint32
	ttft     [nbuckets]uint32
	queue    uint16 // the most waiting seen in a sample
	inFlight uint16 // the most in flight seen in a sample
	sampled  bool
}

// ring is one series: a step per slot, reused as time goes round.
type ring []step

func (r ring) at(i int64) *step {
	s := &r[int(i%int64(len(r)))]
	if s.at != i {
		*s = step{at: i}
	}
	return s
}

// Recorder holds the series. Its zero value is not usable: use New.
type Recorder struct {
	step     time.Duration
	size     int
	mu       sync.Mutex
	total    ring
	accounts map[string]ring
	max      int // most accounts kept; more share "(other)"
}

// New returns a Recorder of size steps of step each (the dashboard's hour
// is 360 steps of 10 s) keeping up to maxAccounts accounts apart.
func New(step time.Duration, size, maxAccounts int) *Recorder {
	return &Recorder{step: step, size: size, total: make(ring, size), accounts: map[string]ring{}, max: maxAccounts}
}

// Other is the series of the accounts past the Recorder's maximum.
const Other = "(other)"

func (r *Recorder) index(t time.Time) int64 { return t.UnixNano() / int64(r.step) }

func (r *Recorder) account(name string) ring {
	a, ok := r.accounts[name]
	if !ok {
		if len(r.accounts) >= r.max {
			name = Other
			if a, ok = r.accounts[name]; ok {
				return a
			}
		}
		a = make(ring, r.size)
		r.accounts[name] = a
	}
	return a
}

func bucket(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	return sort.SearchFloat64s(bounds[:], ms)
}

// Observe counts a request that ended at t: its account ("" before any
// worker took it), outcome, latency and time to its first event (0: none).
func (r *Recorder) Observe(t time.Time, account string, outcome int, latency, ttft time.Duration) {
	i := r.index(t)
	lb, tb := bucket(latency), bucket(ttft)
	r.mu.Lock()
	defer r.mu.Unlock()
	add := func(s *step) {
		s.n[outcome]++
		s.latency[lb]++
		if ttft > 0 {
			s.ttft[tb]++
		}
	}
	add(r.total.at(i))
	if account != "" {
		add(r.account(account).at(i))
	}
}

// FollowUp counts a follow-up turn (a request that continues a
// conversation) that account answered at t, and whether it continued its
// upstream session.
func (r *Recorder) FollowUp(t time.Time, account string, reused bool) {
	i := r.index(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	add := func(s *step) {
		s.followUp++
		if reused {
			s.reused++
		}
	}
	add(r.total.at(i))
	if account != "" {
		add(r.account(account).at(i))
	}
}

// Sample notes the queue depth and the turns in flight at t, in total and
// per account (only accounts already known or with turns in flight are
// kept).
func (r *Recorder) Sample(t time.Time, queue, inFlight int, perAccount map[string]int) {
	i := r.index(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	note := func(s *step, q, f int) {
		s.sampled = true
		s.queue = max(s.queue, clamp(q))
		s.inFlight = max(s.inFlight, clamp(f))
	}
	note(r.total.at(i), queue, inFlight)
	for name, n := range perAccount {
		if _, ok := r.accounts[name]; ok || n > 0 {
			note(r.account(name).at(i), 0, n)
		}
	}
}

func clamp(n int) uint16 { return uint16(min(max(n, 0), math.MaxUint16)) }

// Point is one step of a series as the dashboard draws it: requests per
// second by outcome, latency and time to first token percentiles (ms; -1
// when the step had none), and the sampled queue depth and turns in flight
// (-1 when not sampled).
type Point struct {
	T        int64      `json:"t"` // the step's start, unix ms
	RPS      [4]float64 `json:"rps"`
	P50      float64    `json:"p50_ms"`
	P95      float64    `json:"p95_ms"`
	TTFT50   float64    `json:"ttft_p50_ms"`
	TTFT95   float64    `json:"ttft_p95_ms"`
	Queue    int        `json:"queue"`
	InFlight int        `json:"in_flight"`
	Requests int        `json:"requests"`
	Errors   int        `json:"errors"` // rejected, client errors and failures
	// FollowUps are the follow-up turns answered, Reused those of them
	// that continued their upstream session.
	FollowUps int `json:"follow_ups"`
	Reused    int `json:"reused"`
}

// Summary is one account's last minutes at a glance.
type Summary struct {
	Account  string  `json:"account"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	RPS      float64 `json:"rps"`
	P50      float64 `json:"p50_ms"`
	P95      float64 `json:"p95_ms"`
	TTFT50   float64 `json:"ttft_p50_ms"`
	TTFT95   float64 `json:"ttft_p95_ms"`
	InFlight int     `json:"in_flight"` // the most in the newest sampled step
	// FollowUps are the follow-up turns answered, Reused those of them
	// that continued their upstream session.
	FollowUps int `json:"follow_ups"`
	Reused    int `json:"reused"`
	// Spark is the requests of each minute of the ring, oldest first.
	Spark []int `json:"spark"`
}

// View is what GET /internal/live answers.
type View struct {
	StepMS   int64     `json:"step_ms"`
	Outcomes []string  `json:"outcomes"`
	Account  string    `json:"account"` // the series' account, "" for the total
	Series   []Point   `json:"series"`
	Accounts []Summary `json:"accounts"`
	// FollowUps and Reused are the whole gateway's over the window: the
	// follow-up turns answered, and those that continued their upstream
	// session.
	FollowUps int `json:"follow_ups"`
	Reused    int `json:"reused"`
}

// View returns the series of account ("" for the total) over the ring,
// oldest first, ending with the step of now, and every account's summary
// over the last window.
func (r *Recorder) View(now time.Time, account string, window time.Duration) View {
	end := r.index(now)
	v := View{StepMS: r.step.Milliseconds(), Outcomes: OutcomeNames[:], Account: account}
	r.mu.Lock()
	defer r.mu.Unlock()
	series := r.total
	if account != "" {
		series = r.accounts[account]
	}
	v.Series = make([]Point, 0, r.size)
	for i := end - int64(r.size) + 1; i <= end; i++ {
		var s step
		if series != nil && series[int(i%int64(r.size))].at == i {
			s = series[int(i%int64(r.size))]
		}
		v.Series = append(v.Series, r.point(i, &s))
	}
	steps := max(int(window/r.step), 1)
	names := make([]string, 0, len(r.accounts))
	for name := range r.accounts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v.Accounts = append(v.Accounts, r.summary(name, r.accounts[name], end, steps))
	}
	for k := range min(steps, r.size) {
		i := end - int64(k)
		if s := &r.total[int(i%int64(r.size))]; s.at == i {
			v.FollowUps += int(s.followUp)
			v.Reused += int(s.reused)
		}
	}
	return v
}

func (r *Recorder) point(i int64, s *step) Point {
	p := Point{T: i * r.step.Milliseconds(), Queue: -1, InFlight: -1}
	secs := r.step.Seconds()
	for o, n := range s.n {
		p.RPS[o] = float64(n) / secs
		p.Requests += int(n)
		if o != OK {
			p.Errors += int(n)
		}
	}
	p.P50, p.P95 = percentile(&s.latency, .5), percentile(&s.latency, .95)
	p.TTFT50, p.TTFT95 = percentile(&s.ttft, .5), percentile(&s.ttft, .95)
	if s.sampled {
		p.Queue, p.InFlight = int(s.queue), int(s.inFlight)
	}
	p.FollowUps, p.Reused = int(s.followUp), int(s.reused)
	return p
}

func (r *Recorder) summary(name string, series ring, end int64, steps int) Summary {
	sum := Summary{Account: name, Spark: make([]int, 0, 60)}
	var lat, ttft [nbuckets]uint32
	perMinute := max(int(time.Minute/r.step), 1)
	minute := 0
	for k := r.size - 1; k >= 0; k-- {
		i := end - int64(k)
		s := &series[int(i%int64(len(series)))]
		if s.at == i {
			for o, c := range s.n {
				minute += int(c)
				if k < steps {
					sum.Requests += int(c)
					if o != OK {
						sum.Errors += int(c)
					}
				}
			}
			if k < steps {
				sum.FollowUps += int(s.followUp)
				sum.Reused += int(s.reused)
				for b := range lat {
					lat[b] += s.latency[b]
					ttft[b] += s.ttft[b]
				}
				if s.sampled {
					sum.InFlight = int(s.inFlight)
				}
			}
		}
		if (r.size-k)%perMinute == 0 || k == 0 {
			sum.Spark = append(sum.Spark, minute)
			minute = 0
		}
	}
	sum.RPS = float64(sum.Requests) / (float64(steps) * r.step.Seconds())
	sum.P50, sum.P95 = percentile(&lat, .5), percentile(&lat, .95)
	sum.TTFT50, sum.TTFT95 = percentile(&ttft, .5), percentile(&ttft, .95)
	return sum
}

// percentile estimates the q-quantile of a histogram (ms), interpolating in
// its bucket; -1 when it is empty.
func percentile(h *[nbuckets]uint32, q float64) float64 {
	var total uint64
	for _, c := range h {
		total += uint64(c)
	}
	if total == 0 {
		return -1
	}
	rank := q * float64(total)
	var seen float64
	for b, c := range h {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo := 0.0
			if b > 0 {
				lo = bounds[b-1]
			}
			hi := lo * 2
			if b < len(bounds) {
				hi = bounds[b]
			}
			return math.Round(lo + (hi-lo)*(rank-seen)/float64(c))
		}
		seen += float64(c)
	}
	return bounds[len(bounds)-1]
}
