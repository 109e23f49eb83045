// Package browsertest is the tests' headless Chromium (Debian's, never a
// downloaded one) driven by go-rod: a fresh profile per page, checked to
// leave no process behind, and the waits and screenshots the dashboard
// tests share.
package browsertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/launcher/flags"
	"github.com/go-rod/rod/lib/proto"

	"github.com/poolgate/poolgate/internal/testenv"
)

// Chromium finds Debian's chromium; the test never downloads one.
func Chromium(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatalf("chromium not found: install it with 'apt-get install chromium' or run 'make test'")
	return ""
}

// Open starts a headless Chromium with its own profile and opens a tab.
// At cleanup it closes the browser and checks no process of it is left.
func Open(t testing.TB, bin string) *rod.Page {
	t.Helper()
	dir := t.TempDir()
	var tree []int                                          // the browser's processes, seen just before the close
	t.Cleanup(func() { checkNoBrowserLeft(t, dir, &tree) }) // runs after the close below
	l := launcher.New().Bin(bin).Leakless(true).Headless(true).NoSandbox(os.Geteuid() == 0).UserDataDir(dir)
	for _, f := range []string{"disable-gpu", "disable-background-networking", "disable-component-update",
		"disable-sync", "no-first-run", "disable-quic"} {
		l.Set(flags.Flag(f))
	}
	u := l.MustLaunch()
	b := rod.New().ControlURL(u).MustConnect()
	t.Cleanup(func() {
		tree = append(descendants(l.PID()), l.PID())
		_ = b.Close()
		l.Cleanup()
	})
	page := b.MustPage("").MustSetViewport(1400, 600, 1, false)
	return page
}

// Click clicks the element like a user (mouse over its centre), within 30 s:
// rod waits for the element to be visible, stable and on top, which a page
// redrawn every second under a loaded machine may take a while to be.
func Click(t testing.TB, page *rod.Page, selector string) {
	t.Helper()
	p := page.Timeout(30 * time.Second)
	el, err := p.Element(selector)
	if err == nil {
		err = el.Click(proto.InputMouseButtonLeft, 1)
	}
	if err != nil {
		t.Fatalf("click %s: %v", selector, err)
	}
}

// WaitJS waits up to 15 s until the JS function returns true.
func WaitJS(t testing.TB, page *rod.Page, what, js string, args ...any) {
	t.Helper()
	if err := page.Timeout(15 * time.Second).Wait(rod.Eval(js, args...)); err != nil {
		text := "(unavailable)"
		if body, berr := page.Timeout(2 * time.Second).Element("body"); berr == nil {
			text, _ = body.Text()
		}
		t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, text)
	}
}

// Screenshot writes the page as name (a .png) to the test's temp dir
// and, when POOLGATE_SCREENSHOT_DIR is set, there too.
func Screenshot(t testing.TB, page *rod.Page, name string) {
	t.Helper()
	png, err := page.Screenshot(true, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	keep(t, name, png)
}

// ViewportScreenshot writes what the page's viewport shows as name, as
// Screenshot does the whole page.
func ViewportScreenshot(t testing.TB, page *rod.Page, name string) {
	t.Helper()
	png, err := page.Screenshot(false, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	keep(t, name, png)
}

// ElementScreenshot writes the element selector finds as name, as
// Screenshot does the page.
func ElementScreenshot(t testing.TB, page *rod.Page, selector, name string) {
	t.Helper()
	el, err := page.Timeout(10 * time.Second).Element(selector)
	var png []byte
	if err == nil {
		png, err = el.Screenshot(proto.PageCaptureScreenshotFormatPng, 0)
	}
	if err != nil {
		t.Fatalf("screenshot of %s: %v", selector, err)
	}
	keep(t, name, png)
}

func keep(t testing.TB, name string, png []byte) {
	t.Helper()
	dirs := []string{t.TempDir()}
	if d := os.Getenv("POOLGATE_SCREENSHOT_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("dashboard screenshot: %s", p)
	}
}

// checkNoBrowserLeft fails when a process of the browser is still alive: one
// of its process tree as seen before the close, or any process with the
// test's profile dir on its command line.
func checkNoBrowserLeft(t testing.TB, profile string, tree *[]int) {
	t.Helper()
	if len(*tree) < 2 {
		t.Errorf("saw %d browser processes before the close, want the browser and its helpers", len(*tree))
	}
	testenv.WaitForNoError(t, 5*time.Second, "no chromium process left", func() error {
		var left []int
		for _, pid := range *tree {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		if left = append(left, withArg(profile)...); len(left) > 0 {
			return fmt.Errorf("processes %v are alive", left)
		}
		return nil
	})
}

// procStat returns a process's state letter and parent pid.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0][0], ppid, true
}

func alive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != 'Z'
}

// descendants lists every process under root.
func descendants(root int) []int {
	children := map[int][]int{}
	for _, pid := range allPids() {
		if _, ppid, ok := procStat(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, children[p]...)
		queue = append(queue, children[p]...)
	}
	return out
}

func allPids() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// withArg lists live processes (other than this one) whose command line
// contains s.
func withArg(s string) []int {
	var pids []int
	for _, pid := range allPids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && pid != os.Getpid() && strings.Contains(string(b), s) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
