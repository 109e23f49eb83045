package route

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/poolgate/poolgate/internal/chat"
)

// limitResult is what a whole stream through a limiter produced.
type limitResult struct {
	text   string
	pieces []string
	reason chat.FinishReason
	seq    string
}

// runLimiter feeds chunks through l the way the router does and collects the
// result; reason is "" when the stream ended without the limiter.
func runLimiter(l *limiter, chunks []string) limitResult {
	var r limitResult
	var b strings.Builder
	for _, c := range chunks {
		emit, done, reason, seq := l.text(c)
		if emit != "" {
			r.pieces = append(r.pieces, emit)
		}
		b.WriteString(emit)
		if done {
			r.reason, r.seq = reason, seq
			r.text = b.String()
			return r
		}
	}
	if rest := l.flush(); rest != "" {
		r.pieces = append(r.pieces, rest)
		b.WriteString(rest)
	}
	r.text = b.String()
	return r
}

// runeCount counts one token per rune: simple and exact for the tests.
func runeCount(s string) int { return utf8.RuneCountInString(s) }

func TestLimiterStop(t *testing.T) {
	tests := []struct {
		name       string
		stop       []string
		give       []string
		want       string
		wantReason chat.FinishReason
		wantSeq    string
	}{
		{name: "no stop", give: []string{"hello ", "world"}, want: "hello world"},
		{name: "stop in one chunk", stop: []string{"END"}, give: []string{"abcENDdef"},
			want: "abc", wantReason: chat.FinishStopSequence, wantSeq: "END"},
		{name: "stop at start", stop: []string{"END"}, give: []string{"END"},
			want: "", wantReason: chat.FinishStopSequence, wantSeq: "END"},
		{name: "split over two", stop: []string{"END"}, give: []string{"abcE", "NDdef"},
			want: "abc", wantReason: chat.FinishStopSequence, wantSeq: "END"},
		{name: "split over three", stop: []string{"<stop>"}, give: []string{"x<s", "to", "p>y"},
			want: "x", wantReason: chat.FinishStopSequence, wantSeq: "<stop>"},
		{name: "one byte chunks", stop: []string{"###"}, give: []string{"a", "#", "#", "b", "#", "#", "#", "c"},
			want: "a##b", wantReason: chat.FinishStopSequence, wantSeq: "###"},
		{name: "false prefix released", stop: []string{"END"}, give: []string{"abcEN", "x"},
			want: "abcENx"},
		{name: "prefix at end flushed", stop: []string{"END"}, give: []string{"abcEN"},
			want: "abcEN"},
		{name: "overlapping prefixes", stop: []string{"aab"}, give: []string{"a", "a", "a", "b", "c"},
			want: "a", wantReason: chat.FinishStopSequence, wantSeq: "aab"},
		{name: "first completed wins", stop: []string{"abcd", "c"}, give: []string{"ab", "cd"},
			want: "ab", wantReason: chat.FinishStopSequence, wantSeq: "c"},
		{name: "same end longest wins", stop: []string{"cd", "bcd"}, give: []string{"ab", "cde"},
			want: "a", wantReason: chat.FinishStopSequence, wantSeq: "bcd"},
		{name: "earliest of several", stop: []string{"zz", "yy"}, give: []string{"ayyzz"},
			want: "a", wantReason: chat.FinishStopSequence, wantSeq: "yy"},
		{name: "unicode stop split in rune", stop: []string{"é!"}, give: []string{"caf\xc3", "\xa9!x"},
			want: "caf", wantReason: chat.FinishStopSequence, wantSeq: "é!"},
		{name: "unicode text kept whole", stop: []string{"Ω"}, give: []string{"日本", "語Ω"},
			want: "日本語", wantReason: chat.FinishStopSequence, wantSeq: "Ω"},
		{name: "empty stop ignored", stop: []string{""}, give: []string{"abc"}, want: "abc"},
		{name: "empty deltas", stop: []string{"xy"}, give: []string{"", "ax", "", "y"},
			want: "a", wantReason: chat.FinishStopSequence, wantSeq: "xy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runLimiter(newLimiter(tt.stop, 0, nil), tt.give)
			if got.text != tt.want || got.reason != tt.wantReason || got.seq != tt.wantSeq {
				t.Errorf("got (%q, %q, %q), want (%q, %q, %q)",
					got.text, got.reason, got.seq, tt.want, tt.wantReason, tt.wantSeq)
			}
		})
	}
}

func TestLimiterNeverSplitsRunes(t *testing.T) {
	l := newLimiter([]string{"STOP"}, 0, nil)
	got := runLimiter(l, []string{"a\xe6", "\x97", "\xa5b", "\xf0\x9f", "\x98\x80"})
	for _, p := range got.pieces {
		if !utf8.ValidString(p) {
			t.Errorf("piece %q is not valid UTF-8", p)
		}
	}
	if want := "a日b😀"; got.text != want {
		t.Errorf("got %q, want %q", got.text, want)
	}
}

func TestLimiterMaxTokens(t *testing.T) {
	tests := []struct {
		name       string
		stop       []string
		max        int
		give       []string
		want       string
		wantReason chat.FinishReason
	}{
		{name: "under cap", max: 10, give: []string{"abc", "de"}, want: "abcde"},
		{name: "exactly at cap", max: 5, give: []string{"abc", "de", "fg"}, want: "abcde", wantReason: chat.FinishLength},
		{name: "cut inside delta", max: 4, give: []string{"abc", "defg"}, want: "abcd", wantReason: chat.FinishLength},
		{name: "cut unicode", max: 2, give: []string{"日本語"}, want: "日本", wantReason: chat.FinishLength},
		{name: "stop before cap", stop: []string{"X"}, max: 10, give: []string{"abXcd"},
			want: "ab", wantReason: chat.FinishStopSequence},
		{name: "cap before stop", stop: []string{"X"}, max: 2, give: []string{"abcX"},
			want: "ab", wantReason: chat.FinishLength},
		{name: "held text capped on flush", stop: []string{"XYZ"}, max: 3, give: []string{"abXY"},
			want: "abX"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runLimiter(newLimiter(tt.stop, tt.max, runeCount), tt.give)
			if got.text != tt.want || got.reason != tt.wantReason {
				t.Errorf("got (%q, %q), want (%q, %q)", got.text, got.reason, tt.want, tt.wantReason)
			}
		})
	}
}

func TestLimiterDoneIsFinal(t *testing.T) {
	l := newLimiter([]string{"X"}, 0, nil)
	if _, done, _, _ := l.text("aX"); !done {
		t.Fatal("got done=false on a stop sequence, want true")
	}
	if emit, done, _, _ := l.text("more"); emit != "" || !done {
		t.Errorf("got (%q, %v) after done, want (\"\", true)", emit, done)
	}
	if got := l.flush(); got != "" {
		t.Errorf("got flush %q after done, want \"\"", got)
	}
}

func TestLimiterPassthroughAllocs(t *testing.T) {
	l := newLimiter(nil, 0, nil)
	delta := "some text"
	allocs := testing.AllocsPerRun(100, func() {
		emit, done, _, _ := l.text(delta)
		if emit != delta || done {
			t.Fatalf("got (%q, %v), want (%q, false)", emit, done, delta)
		}
	})
	if allocs != 0 {
		t.Errorf("got %v allocs per passthrough delta, want 0", allocs)
	}
}

// referenceStop is the one-shot rule on the whole text: the stop sequence
// with the earliest end wins (the longest among equal ends).
func referenceStop(text string, stops []string) (string, string) {
	for end := 1; end <= len(text); end++ {
		best := ""
		for _, s := range stops {
			if s != "" && len(s) <= end && text[end-len(s):end] == s && len(s) > len(best) {
				best = s
			}
		}
		if best != "" {
			return text[:end-len(best)], best
		}
	}
	return text, ""
}

// splitAt cuts text into chunks at the positions given by cuts (bytes).
func splitAt(text string, cuts []byte) []string {
	var chunks []string
	for _, c := range cuts {
		if text == "" {
			break
		}
		n := int(c) % (len(text) + 1)
		chunks = append(chunks, text[:n])
		text = text[n:]
	}
	return append(chunks, text)
}

func FuzzLimiter(f *testing.F) {
	f.Add("hello END world", "END", "", []byte{3, 4, 2}, 0)
	f.Add("aaab", "aab", "b", []byte{1, 1, 1}, 0)
	f.Add("日本語のテキスト", "のテ", "ト", []byte{1, 2, 5}, 3)
	f.Add("abcd", "abcd", "c", []byte{2}, 0)
	f.Fuzz(func(t *testing.T, text, stop1, stop2 string, cuts []byte, maxTokens int) {
		stops := []string{stop1, stop2}
		chunks := splitAt(text, cuts)
		maxTokens %= 64
		got := runLimiter(newLimiter(stops, maxTokens, runeCount), chunks)

		want, wantSeq := referenceStop(text, stops)
		if maxTokens <= 0 {
			if got.text != want {
				t.Fatalf("chunks %q stops %q: got %q, want %q", chunks, stops, got.text, want)
			}
			if got.seq != wantSeq {
				t.Fatalf("chunks %q stops %q: got seq %q, want %q", chunks, stops, got.seq, wantSeq)
			}
			return
		}
		// With a cap the output is a prefix of the reference within the cap.
		if !strings.HasPrefix(want, got.text) {
			t.Fatalf("chunks %q stops %q max %d: got %q, not a prefix of %q", chunks, stops, maxTokens, got.text, want)
		}
		if utf8.ValidString(text) && runeCount(got.text) > maxTokens {
			t.Fatalf("got %d tokens %q, want at most %d", runeCount(got.text), got.text, maxTokens)
		}
	})
}

func BenchmarkLimiter(b *testing.B) {
	chunks := strings.Fields(strings.Repeat("the quick brown fox jumps over the lazy dog ", 20))
	b.Run("passthrough", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l := newLimiter(nil, 0, nil)
			for _, c := range chunks {
				l.text(c)
			}
		}
	})
	b.Run("stops", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l := newLimiter([]string{"</answer>", "\n\nHuman:"}, 0, nil)
			for _, c := range chunks {
				l.text(c)
			}
			l.flush()
		}
	})
}
