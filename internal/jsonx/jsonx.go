// Package jsonx has the small JSON encoding helpers the hot paths share
// (protocol stream encoders, the prompt renderer), where encoding/json would
// allocate per call.
package jsonx

import (
	"bytes"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// IsNull reports whether a raw JSON value (a json.RawMessage) is absent or
// null, white space around it aside: decoders keep some fields raw only to
// notice them, and a null says no more than an absent field.
func IsNull(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// AppendString appends s as a JSON string literal. It is the hot path of every
// streamed delta, so it copies runs of safe bytes at once and never allocates
// beyond growing b. Invalid UTF-8 becomes U+FFFD, as encoding/json does;
// U+2028/U+2029 are escaped so the output is also valid JavaScript.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case utf8.RuneError:
				b = append(b, `\ufffd`...)
			case '\u2028':
				b = append(b, `\u2028`...)
			default:
				b = append(b, `\u2029`...)
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// StringLen is the length of AppendString(nil, s), quotes included,
// counted without writing it: a driver uses it to tell, before encoding a
// large turn, whether its worker would take the encoded frame. Every byte
// of s becomes at most 6 (a control character or an invalid byte).
func StringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c >= 0x20 && c != '"' && c != '\\':
				n++
			case c == '"', c == '\\', c == '\n', c == '\r', c == '\t':
				n += 2
			default:
				n += 6
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n
}
