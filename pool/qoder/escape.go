package qoder

import (
	"strings"
	"unicode"
)

// Escape makes a prompt safe to hand to qodercli as a user message, so
// that it is read as text and nothing else:
//
//   - A message whose text, trimmed, opens with "/" is run as one of the
//     CLI's commands (/clear, /login, /add-dir, which waits for a dialog
//     that never comes). A zero-width space (U+200B) before it is not
//     trimmed, so the text no longer opens with "/".
//   - "@" followed by a path-like word attaches that file or directory
//     listing to the message, from anywhere the worker may read ("@/etc/
//     hostname", "@../other-account/config/.auth/user", and the "example.com"
//     of an e-mail address when such a file exists), whatever the tools
//     setting. A zero-width no-break space (U+FEFF) after every "@" breaks
//     every form of mention: the CLI's pattern wants the path (or an agent's
//     name) right after the "@", and U+FEFF is white space to it. A
//     zero-width character before the path would not do: it becomes a path
//     element that ".." removes again.
//
// Both characters are invisible, so the model reads the text as it was
// sent. docs/qoder-worker.md has what was seen.
func Escape(prompt string) string {
	if strings.HasPrefix(strings.TrimLeftFunc(prompt, jsSpace), "/") {
		prompt = zeroWidthSpace + prompt
	}
	if !strings.Contains(prompt, "@") {
		return prompt
	}
	return strings.ReplaceAll(prompt, "@", "@"+zeroWidthNoBreak)
}

// jsSpace is white space as JavaScript's trim sees it: Unicode's, and
// U+FEFF.
func jsSpace(r rune) bool { return unicode.IsSpace(r) || r == '\ufeff' }

const (
	zeroWidthSpace   = "\u200b"
	zeroWidthNoBreak = "\ufeff"
)
