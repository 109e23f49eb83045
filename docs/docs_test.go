// Package docs_test holds the documentation to the code: the runnable shell
// blocks of README.md and docs/ run against a real daemon, every other shell
// block parses, every setting the pages name exists, and every relative link
// and anchor resolves. docs/development.md describes the conventions.
package docs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/config"
	_ "github.com/poolgate/poolgate/pool/drivers" // the drivers' sections are settings too
)

// page is one Markdown file, by its path from the repository root.
type page struct {
	path string
	text string
}

// pages reads README.md and every docs/*.md.
func pages(t *testing.T) []page {
	t.Helper()
	paths, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	out := []page{}
	for _, p := range append([]string{"../README.md"}, paths...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(p, "../")
		if !strings.HasPrefix(p, "../") {
			name = "docs/" + p
		}
		out = append(out, page{path: name, text: string(b)})
	}
	return out
}

// block is one fenced code block.
type block struct {
	page string
	line int      // of the opening fence
	lang string   // first word of the info string
	tags []string // the rest of it
	body string
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.page, b.line) }

func (b block) runnable() bool { return slices.Contains(b.tags, "runnable") }

// env is the KEY=VALUE words of a runnable block's info string: the daemon
// it runs against is started with them, and the block sees them too.
func (b block) env() []string {
	var env []string
	directives := false
	for _, w := range b.tags {
		if strings.Contains(w, "=") {
			env = append(env, w)
			directives = directives || strings.HasPrefix(w, "POOLGATE_SIM_DIRECTIVES=")
		}
	}
	if !directives {
		// As `go run ./cmd/poolgate` starts: a block that uses [[sim:...]]
		// says so.
		env = append(env, "POOLGATE_SIM_DIRECTIVES=false")
	}
	return env
}

// blocks returns a page's fenced code blocks (``` or ~~~ fences, of any
// length; a longer fence may hold a shorter one).
func blocks(p page) []block {
	var out []block
	lines := strings.Split(p.text, "\n")
	for i := 0; i < len(lines); i++ {
		fence, info, ok := openFence(lines[i])
		if !ok {
			continue
		}
		words := strings.Fields(info)
		b := block{page: p.path, line: i + 1}
		if len(words) > 0 {
			b.lang, b.tags = words[0], words[1:]
		}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != fence; i++ {
			body = append(body, lines[i])
		}
		b.body = strings.Join(body, "\n") + "\n"
		out = append(out, b)
	}
	return out
}

func openFence(line string) (fence, info string, ok bool) {
	s := strings.TrimLeft(line, " ")
	if len(line)-len(s) > 3 {
		return "", "", false
	}
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(s) && s[n] == c {
			n++
		}
		if n >= 3 {
			return s[:n], strings.TrimSpace(s[n:]), true
		}
	}
	return "", "", false
}

func isShell(lang string) bool { return lang == "sh" || lang == "bash" || lang == "shell" }

// Every shell block parses (bash -n), runnable or not: a block that needs
// a real account or a Docker engine is at least checked for syntax.
func TestShellBlocksParse(t *testing.T) {
	n := 0
	for _, p := range pages(t) {
		for _, b := range blocks(p) {
			if !isShell(b.lang) {
				continue
			}
			n++
			cmd := exec.Command("bash", "-n")
			cmd.Stdin = strings.NewReader(b.body)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: the shell block does not parse: %v\n%s", b, err, out)
			}
		}
	}
	if n == 0 {
		t.Fatal("found no shell blocks in README.md and docs/: is the test reading the right directory?")
	}
}

// blockTimeout bounds one runnable block; it only calls a local daemon
// serving simulated workers, so a block that takes longer is stuck.
const blockTimeout = 90 * time.Second

// Every block marked runnable (```sh runnable) runs against a daemon
// started as `go run ./cmd/poolgate` starts it, keyless with simulated
// accounts, plus the block's KEY=VALUE words, on a free port in place of
// 8080. curl in a block fails on an HTTP error status.
func TestRunnableBlocks(t *testing.T) {
	var run []block
	for _, p := range pages(t) {
		for _, b := range blocks(p) {
			if !b.runnable() {
				continue
			}
			if !isShell(b.lang) {
				t.Errorf("%s: only sh, bash and shell blocks can be runnable, not %q", b, b.lang)
				continue
			}
			run = append(run, b)
		}
	}
	if len(run) == 0 {
		t.Fatal("no runnable blocks found in README.md and docs/")
	}
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the docs' runnable examples need %s: install it (make deps, or apt-get install %s)", tool, tool)
		}
	}
	// One daemon per set of settings, living as long as the whole test.
	daemons := map[string]*daemontest.Daemon{}
	for _, b := range run {
		if key := strings.Join(b.env(), " "); daemons[key] == nil {
			daemons[key] = daemontest.StartDaemon(t, b.env()...)
		}
	}
	for _, d := range daemons {
		d.WaitReady(t, 60*time.Second)
	}
	for _, b := range run {
		t.Run(b.String(), func(t *testing.T) {
			runBlock(t, b, daemons[strings.Join(b.env(), " ")])
		})
	}
}

// curlFails makes curl in a block fail on an HTTP error, quietly otherwise.
const curlFails = `curl() { command curl --silent --show-error --fail-with-body --max-time 60 "$@"; }` + "\n"

func runBlock(t *testing.T, b block, d *daemontest.Daemon) {
	t.Helper()
	script := b.body
	for _, addr := range []string{"127.0.0.1:8080", "localhost:8080"} {
		script = strings.ReplaceAll(script, addr, d.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", curlFails+script)
	cmd.Env = append(os.Environ(), b.env()...)
	cmd.Dir = ".."
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s: the block did not finish within %s; it printed:\n%s", b, blockTimeout, out.String())
	}
	if err != nil {
		t.Fatalf("%s: the block failed (%v) against the daemon at %s; it printed:\n%s\nthe block, as run:\n%s", b, err, d.Addr, out.String(), script)
	}
	if strings.TrimSpace(out.String()) == "" {
		t.Errorf("%s: the block printed nothing; a documented example should show its answer", b)
	}
}

// notSettings are POOLGATE_ names the pages mention that are not daemon
// settings, each with where it belongs.
var notSettings = map[string]string{
	"POOLGATE_API_KEY":        "the variable Codex CLI reads the key from (env_key in ~/.codex/config.toml)",
	"POOLGATE_TEST_BIN":       "the poolgate binary `make test` builds for the tests",
	"POOLGATE_TEST_SIMWORKER": "read by the tests' simulated worker",
	"POOLGATE_AGENTS_DIR":     "where `make agents` installs the coding agents",
}

var envName = regexp.MustCompile(`POOLGATE_[A-Z0-9_]*[A-Z0-9]`)

// Every POOLGATE_ variable the pages name is a setting (or a named
// exception), and every key in a settings column of a table is one.
func TestDocsNameRealSettings(t *testing.T) {
	env := map[string]bool{}
	keys := map[string]bool{}
	for _, k := range config.Keys() {
		env[config.EnvName(k)], keys[k] = true, true
	}
	for _, k := range subKeys() {
		keys[k] = true
	}
	for _, p := range pages(t) {
		for i, line := range strings.Split(p.text, "\n") {
			for _, name := range envName.FindAllString(line, -1) {
				if !env[name] && notSettings[name] == "" {
					t.Errorf("%s:%d names %s, which is no setting of internal/config (a typo, or a setting renamed?)", p.path, i+1, name)
				}
			}
		}
		for _, c := range settingCells(p) {
			if !keys[c.key] {
				t.Errorf("%s:%d: the table's settings column names `%s`, which is no configuration key", p.path, c.line, c.key)
			}
		}
	}
}

// subKeys are the keys of an account and of a named API key.
func subKeys() []string {
	var out []string
	for _, typ := range []reflect.Type{reflect.TypeFor[config.Account](), reflect.TypeFor[config.APIKey]()} {
		for i := range typ.NumField() {
			if k := typ.Field(i).Tag.Get("yaml"); k != "" && k != "-" {
				out = append(out, k)
			}
		}
	}
	return out
}

type cell struct {
	line int
	key  string
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	keyLike    = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// settingCells returns the first backticked word of each cell in a table
// column headed "key", "setting" or "poolgate" (a settings column).
func settingCells(p page) []cell {
	var out []cell
	col := -1
	inFence := false
	for i, line := range strings.Split(p.text, "\n") {
		if _, _, ok := openFence(line); ok {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "|") {
			col = -1
			continue
		}
		cells := splitRow(line)
		if col < 0 {
			col = -2 // a table without a settings column
			for j, h := range cells {
				h = strings.ToLower(strings.TrimSpace(h))
				if strings.HasPrefix(h, "key") || h == "setting" || h == "poolgate" {
					col = j
				}
			}
			continue
		}
		if col < 0 || col >= len(cells) || strings.HasPrefix(strings.TrimSpace(cells[col]), "---") {
			continue
		}
		if m := backticked.FindStringSubmatch(cells[col]); m != nil && keyLike.MatchString(m[1]) {
			out = append(out, cell{line: i + 1, key: m[1]})
		}
	}
	return out
}

// splitRow splits a table row on the pipes that are not escaped.
func splitRow(line string) []string {
	line = strings.Trim(strings.TrimSpace(line), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		if line[i] == '\\' && i+1 < len(line) && line[i+1] == '|' {
			cur.WriteByte('|')
			i++
			continue
		}
		if line[i] == '|' {
			cells = append(cells, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(line[i])
	}
	return append(cells, cur.String())
}

var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of README.md and docs/ points at a file that exists,
// and its #anchor at a heading of that file.
func TestDocLinks(t *testing.T) {
	for _, p := range pages(t) {
		for i, line := range proseLines(p.text) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := filepath.Join("..", filepath.Dir(p.path), file)
				if file == "" {
					path = filepath.Join("..", p.path)
				}
				b, err := os.ReadFile(path)
				if err != nil {
					if st, serr := os.Stat(path); serr == nil && st.IsDir() && anchor == "" {
						continue
					}
					t.Errorf("%s:%d links to %s, which does not exist", p.path, i+1, target)
					continue
				}
				if anchor != "" && strings.HasSuffix(path, ".md") && !slices.Contains(anchors(string(b)), anchor) {
					t.Errorf("%s:%d links to %s, but %s has no heading #%s (headings: %v)", p.path, i+1, target, file, anchor, anchors(string(b)))
				}
			}
		}
	}
}

// unfenced is the text's lines with code blocks blanked.
func unfenced(text string) []string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if _, _, ok := openFence(l); ok {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	return lines
}

// proseLines is unfenced with inline code blanked too, so a link in an
// example is not taken for one.
func proseLines(text string) []string {
	lines := unfenced(text)
	for i, l := range lines {
		lines[i] = backticked.ReplaceAllString(l, "``")
	}
	return lines
}

// anchors are the GitHub anchors of a page's headings.
func anchors(text string) []string {
	var out []string
	seen := map[string]int{}
	for _, l := range unfenced(text) {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", a, n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

// The README is the front door: short, and the two commands a newcomer
// runs are its first shell block.
func TestREADMEIsAFrontDoor(t *testing.T) {
	p := pages(t)[0]
	if len(p.text) > 12<<10 {
		t.Errorf("README.md is %d bytes; keep it under 12 KiB and move reference material into docs/", len(p.text))
	}
	for _, b := range blocks(p) {
		if !isShell(b.lang) {
			continue
		}
		for _, cmd := range []string{"go run ./cmd/poolgate", "make test"} {
			if !strings.Contains(b.body, cmd) {
				t.Errorf("README.md's first shell block (%s) lacks %q", b, cmd)
			}
		}
		return
	}
	t.Error("README.md has no shell block")
}
