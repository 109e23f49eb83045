package tokens

import (
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	tiktoken "github.com/pkoukk/tiktoken-go"
)

func TestCount(t *testing.T) {
	// Expected counts are cl100k_base's, as published in OpenAI's cookbook
	// ("How to count tokens with tiktoken") and by the Python tiktoken.
	tests := []struct {
		give string
		want int
	}{
		{give: "", want: 0},
		{give: "hello world", want: 2},
		{give: "Hello, world!", want: 4},
		{give: "tiktoken is great!", want: 6},
		{give: "antidisestablishmentarianism", want: 6},
		{give: "2 + 2 = 4", want: 7},
		{give: "お誕生日おめでとう", want: 9},
	}
	for _, tt := range tests {
		if got := Count(tt.give); got != tt.want {
			t.Errorf("Count(%q) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

func TestCountSpecialTokenTextIsOrdinary(t *testing.T) {
	// Must not panic and must count the marker as plain text (more than the
	// single special token it would be).
	if got := Count("<|endoftext|>"); got <= 1 {
		t.Errorf("Count(<|endoftext|>) = %d, want > 1", got)
	}
}

func TestCountConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got := Count("hello world"); got != 2 {
				t.Errorf("Count = %d, want 2", got)
			}
		})
	}
	wg.Wait()
}

func BenchmarkCount(b *testing.B) {
	if _, err := ranks(); err != nil {
		b.Fatal(err)
	}
	b.Run("delta", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Count(" quick")
		}
	})
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)
	b.Run("4KiB", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			Count(text)
		}
	})
}

// reference is the regexp-based tiktoken-go encoder, the implementation
// Count must agree with.
var reference = sync.OnceValue(func() *tiktoken.Tiktoken {
	r, err := ranks()
	if err != nil {
		panic(err)
	}
	special := map[string]int{"<|endoftext|>": 100257}
	bpe, err := tiktoken.NewCoreBPE(r, special, cl100kPattern)
	if err != nil {
		panic(err)
	}
	return tiktoken.NewTiktoken(bpe, &tiktoken.Encoding{Name: Encoding, PatStr: cl100kPattern, MergeableRanks: r, SpecialTokens: special}, nil)
})

// cl100kPattern is cl100k_base's split regex, as tiktoken publishes it.
const cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

func TestSplitMatchesRegex(t *testing.T) {
	texts := []string{
		"Hello, world! I'm here; they'RE 'll 'Ve done.\n\n  indented\tcode()\r\n",
		"func main() {\n\tfmt.Println(\"hi\")  \n}\n",
		"12345 1.5e10 ١٢٣ ½ 3rd",
		"日本語のテキスト、句読点。 Ünïcödé  ‐ — “quotes”",
		"   trailing spaces   ",
		"a\u00a0b\u2003c\u3000d\u0085e\u2028f",
		"emoji 😀👍🏽 and zwj 👩‍💻",
		"<|endoftext|> special",
		"x=1;y=2;;\n\n\n// comment\n  \n",
	}
	for _, s := range texts {
		want := len(reference().EncodeOrdinary(s))
		if got := Count(s); got != want {
			t.Errorf("Count(%q) = %d, want %d (tiktoken-go)", s, got, want)
		}
	}
}

func FuzzCountMatchesRegex(f *testing.F) {
	f.Add("Hello, world! I'm here.")
	f.Add("\n\n \t x 'S 'LL 12345")
	f.Add("日本語 ١٢٣ 😀")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || len(s) > maxPiece {
			return // invalid UTF-8 and slicing of huge pieces are deliberate differences
		}
		want := len(reference().EncodeOrdinary(s))
		if got := Count(s); got != want {
			t.Fatalf("Count(%q) = %d, want %d (tiktoken-go)", s, got, want)
		}
	})
}

func TestCountHugePieceIsBounded(t *testing.T) {
	s := strings.Repeat("a", 256<<10) // one 256 KiB piece
	start := time.Now()
	n := Count(s)
	if n == 0 || time.Since(start) > 5*time.Second {
		t.Errorf("Count of 256 KiB of one letter = %d in %v, want > 0 within 5s", n, time.Since(start))
	}
}

// TestLongWordsAllocateNothing: a prompt of one word a megabyte long is
// merged in slices of maxPiece bytes; none of them costs a heap allocation
// (a 7.5 MB such word once cost some 120 MB of garbage).
func TestLongWordsAllocateNothing(t *testing.T) {
	word := strings.Repeat("a", 100000) + " " + strings.Repeat("7", 3000)
	Count(word) // loads the table
	if n := testing.AllocsPerRun(3, func() { Count(word) }); n != 0 {
		t.Errorf("Count of a 100 KB word made %v allocations, want none", n)
	}
}
