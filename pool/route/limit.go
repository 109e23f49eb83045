package route

import (
	"strings"
	"unicode/utf8"

	"github.com/poolgate/poolgate/internal/chat"
)

// limiter enforces stop sequences and an output-token cap on a text stream.
// The router runs every answer's text deltas through one, so each protocol
// gets the same semantics whatever the worker supports.
//
// Stop sequences: the answer ends at the first stop sequence to be completed
// in the text (the earliest end; of several ending at the same byte, the
// longest), and is cut where that sequence starts. This rule depends only on
// the whole text, never on how it was split into deltas. To honour it across
// deltas the limiter holds back the longest tail that is a proper prefix of a
// stop sequence (at most len(longest stop)-1 bytes), plus an incomplete
// trailing UTF-8 sequence, so an emitted piece never splits a rune.
//
// Token cap: tokens are counted per emitted piece with count and summed. A
// worker's deltas are whole tokens, so the sum tracks the real count closely
// (a piece boundary inside a token may overcount by one). The piece that
// reaches the cap is cut at the longest rune-aligned prefix that still fits,
// found by binary search with count, and the answer ends with FinishLength.
//
// A limiter is used by one goroutine.
type limiter struct {
	stops   []string
	maxStop int // length of the longest stop sequence
	max     int // token cap; 0 means none
	used    int // tokens emitted so far
	count   func(string) int
	held    []byte // text held back: a possible stop prefix or a split rune
	done    bool
}

// newLimiter returns a limiter for the given stop sequences (empty ones are
// ignored) and token cap (0 or less means none). count may be nil when
// maxTokens is 0.
func newLimiter(stop []string, maxTokens int, count func(string) int) *limiter {
	l := &limiter{count: count}
	for _, s := range stop {
		if s == "" {
			continue
		}
		l.stops = append(l.stops, s)
		l.maxStop = max(l.maxStop, len(s))
	}
	if maxTokens > 0 && count != nil {
		l.max = maxTokens
	}
	return l
}

// passthrough reports whether the limiter has nothing to enforce.
func (l *limiter) passthrough() bool { return len(l.stops) == 0 && l.max == 0 }

// text takes one delta and returns what may be emitted now; done is true once
// a stop sequence or the cap ended the answer (then reason is
// FinishStopSequence with seq, or FinishLength). After done, text returns
// nothing. With no stop sequences and no cap, text returns delta unchanged
// without allocating.
func (l *limiter) text(delta string) (emit string, done bool, reason chat.FinishReason, seq string) {
	if l.done {
		return "", true, "", ""
	}
	if l.passthrough() {
		return delta, false, "", ""
	}
	// t is the text not yet emitted. Avoid a copy when nothing is held back.
	t := delta
	if len(l.held) > 0 {
		l.held = append(l.held, delta...)
		t = string(l.held)
	}
	l.held = l.held[:0]

	if cut, s, ok := l.firstStop(t); ok {
		emit, capped := l.capped(t[:cut])
		l.done = true
		if capped {
			return emit, true, chat.FinishLength, ""
		}
		return emit, true, chat.FinishStopSequence, s
	}

	keep := l.holdFrom(t)
	emit, capped := l.capped(t[:keep])
	if capped {
		l.done = true
		return emit, true, chat.FinishLength, ""
	}
	l.held = append(l.held, t[keep:]...)
	return emit, false, "", ""
}

// flush returns the text held back at the end of the stream (still subject
// to the cap; a flush that hits the cap is cut, but the answer keeps the
// worker's own finish reason since the text was complete anyway).
func (l *limiter) flush() string {
	if l.done || len(l.held) == 0 {
		return ""
	}
	l.done = true
	emit, _ := l.capped(string(l.held))
	l.held = l.held[:0]
	return emit
}

// firstStop finds the stop sequence completed first in t (earliest end, then
// the longest) and returns where it starts. No stop sequence can be complete
// inside the text held back before, so every match ends in the new delta.
func (l *limiter) firstStop(t string) (cut int, seq string, ok bool) {
	bestEnd := -1
	for _, s := range l.stops {
		i := strings.Index(t, s)
		if i < 0 {
			continue
		}
		end := i + len(s)
		if bestEnd < 0 || end < bestEnd || (end == bestEnd && len(s) > len(seq)) {
			bestEnd, cut, seq = end, i, s
		}
	}
	return cut, seq, bestEnd >= 0
}

// holdFrom returns the index where the held-back tail of t starts: the
// longest suffix that is a proper prefix of a stop sequence, widened to not
// split a trailing incomplete rune.
func (l *limiter) holdFrom(t string) int {
	keep := len(t)
	// Longest first, so the first hit is the answer.
	for k := min(len(t), l.maxStop-1); k > 0; k-- {
		if l.isStopPrefix(t[len(t)-k:]) {
			keep = len(t) - k
			break
		}
	}
	return runeStart(t, keep)
}

func (l *limiter) isStopPrefix(tail string) bool {
	for _, s := range l.stops {
		if len(tail) < len(s) && strings.HasPrefix(s, tail) {
			return true
		}
	}
	return false
}

// runeStart moves i back to the start of an incomplete UTF-8 sequence that
// ends t[:i], so t[:i] does not end inside a rune that continues later.
func runeStart(t string, i int) int {
	for j := i - 1; j >= 0 && j >= i-utf8.UTFMax+1; j-- {
		if !utf8.RuneStart(t[j]) {
			continue
		}
		if !utf8.FullRuneInString(t[j:i]) {
			return j
		}
		break
	}
	return i
}

// capped applies the token cap to s. It returns the part of s that fits and
// whether the cap was reached (the answer is over).
func (l *limiter) capped(s string) (string, bool) {
	if l.max == 0 || s == "" {
		return s, false
	}
	n := l.count(s)
	left := l.max - l.used
	if n < left {
		l.used += n
		return s, false
	}
	if n == left {
		l.used = l.max
		return s, true
	}
	// Binary search the longest rune-aligned prefix that fits in left tokens.
	lo, hi := 0, len(s) // s[:lo] fits; s[:hi] does not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		for mid > lo && !utf8.RuneStart(s[mid]) {
			mid--
		}
		if mid == lo {
			// No rune start between lo and the midpoint; try forward.
			mid = lo + (hi-lo)/2
			for mid < hi && !utf8.RuneStart(s[mid]) {
				mid++
			}
			if mid == hi {
				break
			}
		}
		if l.count(s[:mid]) <= left {
			lo = mid
		} else {
			hi = mid
		}
	}
	l.used = l.max
	return s[:lo], true
}
