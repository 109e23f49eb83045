package sim

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Section roles of the prompt contract (docs/prompt-contract.md).
const (
	roleSystem     = "system"
	roleTools      = "tools"
	roleContract   = "contract"
	roleUser       = "user"
	roleAssistant  = "assistant"
	roleToolCall   = "tool_call"
	roleToolResult = "tool_result"
	roleFormat     = "format"
)

// section is one `<<<role key=value>>>` block of a prompt.
type section struct {
	role  string
	attrs map[string]string
	body  string
}

// parsePrompt splits a prompt into sections. Text without any marker line is
// one user section; non-blank text before the first marker is a user section.
func parsePrompt(text string) []section {
	var (
		out   []section
		cur   *section
		lines []string
	)
	flush := func() {
		body := strings.TrimRight(strings.Join(lines, "\n"), "\r\n")
		lines = lines[:0]
		if cur == nil {
			if strings.TrimSpace(body) != "" {
				out = append(out, section{role: roleUser, body: body})
			}
			return
		}
		cur.body = body
		out = append(out, *cur)
	}
	for _, line := range strings.Split(text, "\n") {
		if s, ok := parseMarker(line); ok {
			flush()
			cur = &s
			continue
		}
		if strings.HasPrefix(line, " <<<") {
			line = line[1:]
		}
		lines = append(lines, line)
	}
	flush()
	return out
}

// relayed reads a prompt that an agent CLI worker passed on. A gateway
// in front of an agent CLI (poolgate's claude-code kind) renders its
// conversation into one user message of the contract, which the CLI sends
// its upstream as its user's text: a model reads the sections in it as the
// conversation, and so does the simulator. When the newest user section's
// body is itself a prompt of the contract (it opens with a marker line),
// its sections are the prompt's.
func relayed(secs []section) []section {
	i := lastUser(secs)
	if i < 0 {
		return secs
	}
	first, _, _ := strings.Cut(strings.TrimLeft(secs[i].body, "\n"), "\n")
	if _, ok := parseMarker(first); !ok {
		return secs
	}
	return parsePrompt(secs[i].body)
}

// parseMarker reads `<<<role>>>` or `<<<role key=value ...>>>`.
func parseMarker(line string) (section, bool) {
	line = strings.TrimRight(line, "\r")
	if !strings.HasPrefix(line, "<<<") || !strings.HasSuffix(line, ">>>") || len(line) < 7 {
		return section{}, false
	}
	fields := strings.Fields(line[3 : len(line)-3])
	if len(fields) == 0 {
		return section{}, false
	}
	s := section{role: fields[0]}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			if s.attrs == nil {
				s.attrs = map[string]string{}
			}
			s.attrs[k] = v
		}
	}
	return s, true
}

// lastTurn returns the index of the newest section that is not a system
// section (agents put their environment after the user's text), or -1.
func lastTurn(secs []section) int {
	for i := len(secs) - 1; i >= 0; i-- {
		if secs[i].role != roleSystem {
			return i
		}
	}
	return -1
}

// lastUser returns the index of the last user section, or -1.
// lastUserText is the body of the last user section, or "".
func lastUserText(secs []section) string {
	if i := lastUser(secs); i >= 0 {
		return secs[i].body
	}
	return ""
}

func lastUser(secs []section) int {
	for i := len(secs) - 1; i >= 0; i-- {
		if secs[i].role == roleUser {
			return i
		}
	}
	return -1
}

// directiveText is the prompt text whose directives count: system sections
// and everything from the last user section on.
func directiveText(secs []section) string {
	from := max(lastUser(secs), 0)
	var b strings.Builder
	for i, s := range secs {
		if s.role == roleSystem || i >= from {
			b.WriteString(s.body)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// directiveRE matches [[sim:name]] and [[sim:name=value]]; a value may hold
// single brackets (JSON arguments), not "]]".
var directiveRE = regexp.MustCompile(`\[\[sim:([a-z_-]+)(?:=((?:[^\]]|\][^\]])*))?\]\]`)

// stripRE also eats the blank before a directive so "a [[sim:x]] b" reads "a b".
var stripRE = regexp.MustCompile(`[ \t]*\[\[sim:(?:[^\]]|\][^\]])*\]\]`)

// reminderRE matches the <system-reminder> blocks coding agents put into the
// user's message (Gemini CLI's <session_context>): context for a model, not
// what the user said.
var reminderRE = regexp.MustCompile(`(?s)<system-reminder>.*?</system-reminder>|<session_context>.*?</session_context>`)

// stripDirectives removes directives and agents' reminders from user text.
func stripDirectives(s string) string {
	s = reminderRE.ReplaceAllString(s, "")
	return strings.TrimSpace(stripRE.ReplaceAllString(s, ""))
}

// directives are the faults and answer shapes a prompt asks for. Numbers are
// -1 and durations < 0 when the prompt does not set them.
type directives struct {
	// calls are the tool calls [[sim:call=NAME {args}]] asks for, in order.
	calls []directedCall
	// builtins are the worker's own tools [[sim:builtin=NAME]] and
	// [[sim:builtin-async=NAME]] ask the client to run, in order.
	builtins            []builtin
	whoami, ask, env    bool
	toolCode, think     bool
	crash, hang, logout bool
	// offModel prints lines outside the protocol first (agent-cli).
	offModel           bool
	ratelimit, timeout bool
	// awaitResults keeps a native tool turn open after its tool/invoke
	// requests instead of finishing it.
	awaitResults            bool
	retryAfter              time.Duration
	words, chunks, errAfter int
	delay, chunkDelay       time.Duration
	unknown                 []string
}

// directivesOf are the directives of a prompt's sections when the worker
// takes them (on: Config.Directives, agent-cli's --directives); none
// otherwise.
func directivesOf(on bool, secs []section) directives {
	if !on {
		return parseDirectives("")
	}
	return parseDirectives(directiveText(secs))
}

func parseDirectives(text string) directives {
	d := directives{words: -1, chunks: -1, errAfter: -1, delay: -1, chunkDelay: -1, retryAfter: time.Second}
	for _, m := range directiveRE.FindAllStringSubmatch(text, -1) {
		name, val := m[1], m[2]
		ok := true
		switch name {
		case "call":
			var c directedCall
			if c, ok = parseCall(val); ok {
				d.calls = append(d.calls, c)
			}
		case "builtin", "builtin-async":
			ok = val != ""
			d.builtins = append(d.builtins, builtin{name: val, async: name == "builtin-async"})
		case "error":
			d.errAfter = 0
		case "timeout":
			d.timeout = true
		case "error-after":
			d.errAfter, ok = atoiOK(val)
		case "words":
			d.words, ok = countOK(val)
		case "chunks":
			d.chunks, ok = countOK(val)
		case "delay":
			d.delay, ok = durationOK(val)
		case "chunk-delay":
			d.chunkDelay, ok = durationOK(val)
		case "ratelimit":
			d.ratelimit = true
			if val != "" {
				var r time.Duration
				if r, ok = durationOK(val); ok {
					d.retryAfter = r
				}
			}
		default:
			flag := d.flag(name)
			if ok = flag != nil; ok {
				*flag = true
			}
		}
		if !ok {
			d.unknown = append(d.unknown, m[0])
		}
	}
	return d
}

// flag is the switch a directive without a value turns on, or nil.
func (d *directives) flag(name string) *bool {
	return map[string]*bool{"whoami": &d.whoami, "ask": &d.ask, "env": &d.env, "tool_code": &d.toolCode,
		"think": &d.think, "crash": &d.crash, "hang": &d.hang, "await-results": &d.awaitResults,
		"logout": &d.logout, "off-model": &d.offModel}[name]
}

// withDefaults fills what the prompt left unset from the process-wide faults.
func (d directives) withDefaults(f Faults) directives {
	if d.chunks < 0 {
		d.chunks = f.Chunks
	}
	if d.delay < 0 {
		d.delay = f.Delay
	}
	if d.chunkDelay < 0 {
		d.chunkDelay = f.ChunkDelay
	}
	if f.TimeScale > 0 && f.TimeScale != 1 {
		d.delay = time.Duration(float64(d.delay) * f.TimeScale)
		d.chunkDelay = time.Duration(float64(d.chunkDelay) * f.TimeScale)
	}
	return d
}

// directedCall is one [[sim:call=NAME {args}]]: the tool to call and,
// when given, its arguments (else they are built from the tool's schema).
type directedCall struct {
	name string
	args map[string]any
}

// parseCall reads "NAME" or "NAME {json object}".
func parseCall(v string) (directedCall, bool) {
	name, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
	if name == "" {
		return directedCall{}, false
	}
	c := directedCall{name: name}
	if rest = strings.TrimSpace(rest); rest != "" {
		if json.Unmarshal([]byte(rest), &c.args) != nil || c.args == nil {
			return directedCall{}, false
		}
	}
	return c, true
}

// maxCount bounds [[sim:words=N]] and [[sim:chunks=N]]: a prompt must not
// make the worker build an answer of any size it names.
const maxCount = 10000

// countOK reads a word or chunk count, at most maxCount.
func countOK(s string) (int, bool) {
	n, ok := atoiOK(s)
	return min(n, maxCount), ok
}

func atoiOK(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return -1, false
	}
	return n, true
}

func durationOK(s string) (time.Duration, bool) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return -1, false
	}
	return d, true
}
