package httpx

import (
	"bytes"
	"errors"
	"strconv"
)

// MaxDepth is the deepest a request body's JSON may nest: objects and
// arrays within each other, tool schemas and tool arguments included.
// encoding/json stops at 10,000 levels, but a worker that receives the body
// inside a frame of its own (a Lingma ask carries a tool's schema five levels
// down) may stop short of that: tool parameters nested 9,993 deep passed the
// gateway and made the simulator drop the frame and stay silent. No agent
// sends a schema a tenth as deep as this bound.
const MaxDepth = 128

// ErrTooDeep is returned by ReadBody for a body whose JSON nests deeper
// than MaxDepth.
var ErrTooDeep = errors.New("the request body's JSON nests deeper than " + strconv.Itoa(MaxDepth) + " levels")

// depthOK reports whether the JSON text b nests no deeper than max. It is
// one pass that only counts brackets outside strings (what is not JSON is
// the decoder's to refuse), skipping each string with IndexByte: a request
// is mostly strings.
func depthOK(b []byte, max int) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i+1)
		case '{', '[':
			if depth++; depth > max {
				return false
			}
		case '}', ']':
			depth--
		}
	}
	return true
}

// stringEnd returns the index of the quote that ends the string whose text
// starts at i (len(b) when none does): the first quote not escaped by an odd
// run of backslashes. Each backslash is counted once, by the quote it
// precedes, so the scan stays linear.
func stringEnd(b []byte, i int) int {
	start := i
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		i += j
		k := i - 1
		for k >= start && b[k] == '\\' {
			k--
		}
		if (i-1-k)%2 == 0 {
			return i
		}
		i++
	}
}
