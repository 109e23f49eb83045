// Package tokens counts tokens the way OpenAI's cl100k_base BPE encoding
// does. The router uses it to enforce max_tokens and to fill usage when a
// worker reports none; handlers may use it to estimate prompt sizes.
//
// The encoding's merge table is embedded in the binary (via
// github.com/pkoukk/tiktoken-go-loader) and parsed on first use, so nothing is
// downloaded at run time and a process that never counts pays nothing. The
// parsed table (100k ranks) takes about 5 MiB of heap once loaded.
//
// The workers run other models (Qwen and friends) whose tokenizers differ, so
// counts are an estimate of the same order, not the upstream's exact number.
package tokens

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// Encoding is the name of the BPE encoding Count uses.
const Encoding = "cl100k_base"

// maxPiece bounds the bytes one pre-tokenizer piece may hand to the
// quadratic merge loop. Longer pieces (a megabyte of one letter, a huge
// whitespace run) are merged in slices of this size: the count may be off by
// a token per slice, but a hostile prompt cannot pin a core.
const maxPiece = 256

// ranks loads the embedded merge table once. Only the table is taken from
// the tiktoken loader; splitting and merging are done here, which is several
// times faster than the regexp-based tiktoken-go and keeps one map instead of
// three in memory.
var ranks = sync.OnceValues(func() (map[string]int, error) {
	r, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe(Encoding + ".tiktoken")
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", Encoding, err)
	}
	return r, nil
})

// Count returns the number of cl100k_base tokens in s. Special-token text
// such as "<|endoftext|>" counts as ordinary text; invalid UTF-8 counts as
// U+FFFD. If the embedded table cannot be loaded (a corrupt build), Count
// falls back to an estimate of one token per four bytes. It is safe for
// concurrent use and does not allocate.
func Count(s string) int {
	if s == "" {
		return 0
	}
	r, err := ranks()
	if err != nil {
		return (len(s) + 3) / 4
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	n := 0
	for len(s) > 0 {
		k := nextPiece(s)
		for piece := s[:k]; len(piece) > 0; {
			cut := len(piece)
			if cut > maxPiece {
				cut = maxPiece
				for !utf8.RuneStart(piece[cut]) {
					cut--
				}
			}
			n += bpeCount(r, piece[:cut])
			piece = piece[cut:]
		}
		s = s[k:]
	}
	return n
}

// bpeCount returns how many tokens byte-pair merging turns piece into: start
// from single bytes and repeatedly merge the adjacent pair whose joined bytes
// have the lowest rank, until no pair is in the table. The rank of each pair
// is cached and only a merge's neighbours are looked up again, as in
// tiktoken's own implementation.
func bpeCount(ranks map[string]int, piece string) int {
	if _, ok := ranks[piece]; ok {
		return 1
	}
	if len(piece) >= shortPiece {
		// A long piece (a run of letters or digits without a break, cut at
		// maxPiece) merges in pooled buffers: a hostile prompt of one
		// megabyte-long word must not cost kilobytes of garbage per slice.
		b := getLongPiece()
		n := merge(ranks, piece, b.start[:0], b.rank[:0])
		putLongPiece(b)
		return n
	}
	var startBuf, rankBuf [shortPiece]int
	return merge(ranks, piece, startBuf[:0], rankBuf[:0])
}

// shortPiece bounds the pieces merged in buffers on the stack (a common word
// is a few bytes).
const shortPiece = 66

// longPiece holds the merge state of a piece up to maxPiece bytes long.
type longPiece struct{ start, rank [maxPiece + 1]int }

// longPieces keeps a few longPieces for reuse. A channel rather than a
// sync.Pool: a sync.Pool may drop what it is given (the race detector's
// build drops a quarter on purpose), and a dropped one is 8 KiB of garbage
// per long piece; these stay, a handful per process.
var longPieces = make(chan *longPiece, 8)

func getLongPiece() *longPiece {
	select {
	case b := <-longPieces:
		return b
	default:
		return new(longPiece)
	}
}

func putLongPiece(b *longPiece) {
	select {
	case longPieces <- b:
	default: // enough are kept
	}
}

// merge runs bpeCount's merges in start and rank, which have room for a
// part per byte of piece.
func merge(ranks map[string]int, piece string, start, rank []int) int {
	// Part i is piece[start[i]:start[i+1]]; rank[i] is the rank of parts i
	// and i+1 joined (noRank when that pair is not in the table).
	for i := 0; i <= len(piece); i++ {
		start = append(start, i)
	}
	pairRank := func(i int) int {
		if i+2 >= len(start) {
			return noRank
		}
		if r, ok := ranks[piece[start[i]:start[i+2]]]; ok {
			return r
		}
		return noRank
	}
	for i := range start {
		rank = append(rank, pairRank(i))
	}
	for {
		best, at := noRank, -1
		for i, r := range rank {
			if r < best {
				best, at = r, i
			}
		}
		if at < 0 {
			return len(start) - 1
		}
		start = append(start[:at+1], start[at+2:]...)
		rank = append(rank[:at+1], rank[at+2:]...)
		rank[at] = pairRank(at)
		if at > 0 {
			rank[at-1] = pairRank(at - 1)
		}
	}
}

const noRank = int(^uint(0) >> 1)
