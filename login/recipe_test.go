package login

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseRecipes(t *testing.T) {
	const ok = "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - open: login_url\n"
	tests := []struct {
		name    string
		give    string
		want    string // error substring; "" = valid
		wantLen int
	}{
		{"empty document", "", "", 0},
		{"minimal", ok, "", 1},
		{"every action", `recipes:
  r:
    description: all of them
    hosts: [example.com, "*.example.org"]
    password_file: /run/secrets/pw
    steps:
      - open: https://example.com/login
      - wait: "#u"
      - type: "#u"
        field: username
      - type: "#otp"
        text: "123456"
      - click: "#next"
        if: "#next"
        timeout: 2s
      - choose: ".org"
        text: Acme
      - choose: ".org"
      - wait_url: "/auth/callback\\?"
      - wait_text: Welcome
    failure:
      - selector: "#err"
      - text: locked
`, "", 1},
		{"unknown top-level key", "recipe:\n  r: {}\n", "field recipe not found", 0},
		{"unknown recipe key", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    stepz: []\n", "field stepz not found", 0},
		{"unknown step key", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - open: login_url\n        selector: x\n", "field selector not found", 0},
		{"unknown failure key", ok + "    failure:\n      - regex: x\n", "field regex not found", 0},
		{"empty recipe", "recipes:\n  r:\n", `recipe "r" is empty`, 0},
		{"no steps", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    description: x\n", "no steps", 0},
		{"two actions", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - wait: a\n        click: b\n", "exactly one of open", 0},
		{"no action", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - if: a\n", "exactly one of open", 0},
		{"bad open", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - open: ftp://x\n", "neither login_url", 0},
		{"type without field or text", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - type: '#u'\n", "exactly one of field and text", 0},
		{"type with both", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - type: '#u'\n        field: username\n        text: x\n", "exactly one of field and text", 0},
		{"bad field", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - type: '#u'\n        field: email\n", `field "email"`, 0},
		{"field on click", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - click: '#u'\n        field: username\n", "field only goes with type", 0},
		{"text on wait", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - wait: '#u'\n        text: x\n", "text only goes with", 0},
		{"bad regex", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - wait_url: '('\n", "wait_url", 0},
		{"bad timeout", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - wait: a\n        timeout: soon\n", "soon", 0},
		{"negative timeout", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - wait: a\n        timeout: -1s\n", "negative timeout", 0},
		{"failure with both", ok + "    failure:\n      - selector: a\n        text: b\n", "exactly one of selector and text", 0},
		{"failure with neither", ok + "    failure:\n      - {}\n", "exactly one of selector and text", 0},
		{"no hosts", "recipes:\n  r:\n    steps:\n      - open: login_url\n", "hosts: list the hosts", 0},
		{"host with a scheme", "recipes:\n  r:\n    hosts: ['https://x.com']\n    steps:\n      - open: login_url\n", "not a host name", 0},
		{"two password sources", "recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    password_env: A\n    password_file: b\n    steps:\n      - open: login_url\n", "exclusive", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRecipes([]byte(tt.give))
			if tt.want == "" && (err != nil || len(got) != tt.wantLen) {
				t.Fatalf("got %d recipes, %v; want %d, no error", len(got), err, tt.wantLen)
			}
			if tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestParsedStep(t *testing.T) {
	rs, err := ParseRecipes([]byte("recipes:\n  r:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - click: '#next'\n        if: '#next'\n        timeout: 2s\n      - wait_url: cb$\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := rs["r"]
	if r.Name != "r" || r.Steps[0].Timeout != 2*time.Second || r.Steps[0].If != "#next" {
		t.Errorf("got %+v, want name r, timeout 2s, if #next", r)
	}
	if re := r.Steps[1].urlRE; re == nil || !re.MatchString("http://x/cb") {
		t.Errorf("got pattern %v, want one matching .../cb", re)
	}
}

func TestBuiltinRecipes(t *testing.T) {
	rs, err := BuiltinRecipes()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"simworker", "lingma-alibaba", "qoder-device"} {
		if rs[name] == nil {
			t.Errorf("built-in recipe %s missing", name)
		}
	}
}

// TestRecipeFileOverrides: a file's recipe replaces the built-in one of the
// same name and adds new ones.
func TestRecipeFileOverrides(t *testing.T) {
	file := filepath.Join(t.TempDir(), "r.yaml")
	doc := "recipes:\n  simworker:\n    hosts: [127.0.0.1, localhost]\n    description: mine\n    steps:\n      - open: login_url\n  extra:\n    hosts: [127.0.0.1]\n    steps:\n      - open: login_url\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := loadRecipes(file)
	if err != nil {
		t.Fatal(err)
	}
	if rs["simworker"].Description != "mine" || rs["extra"] == nil || rs["lingma-alibaba"] == nil {
		t.Errorf("got %v, want simworker overridden, extra added, lingma-alibaba kept", rs)
	}
}

func TestPasswordSources(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string { return map[string]string{"PW": "from-env"}[k] }
	tests := []struct {
		name    string
		give    Recipe
		account string
		want    string
		wantErr string
	}{
		{"account wins", Recipe{PasswordEnv: "PW"}, "acct", "acct", ""},
		{"env", Recipe{PasswordEnv: "PW"}, "", "from-env", ""},
		{"empty env", Recipe{PasswordEnv: "NOPE"}, "", "", "NOPE is empty"},
		{"file", Recipe{PasswordFile: file}, "", "from-file", ""},
		{"missing file", Recipe{PasswordFile: file + "x"}, "", "", "password_file"},
		{"none", Recipe{}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.give.password(tt.account, getenv)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tt.want || !strings.Contains(gotErr, tt.wantErr) || (tt.wantErr == "") != (err == nil) {
				t.Errorf("got %q, %v; want %q, error containing %q", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	red := newRedactor("p@ss word", "")
	tests := []struct {
		name string
		give string
		want string
	}{
		{"plain", "bad password p@ss word here", "bad password [redacted] here"},
		{"query escaped", "http://x/?pw=p%40ss+word", "http://x/?pw=[redacted]"},
		{"path escaped", "http://x/p@ss%20word/", "http://x/[redacted]/"},
		{"nothing", "fine", "fine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := red.redact(tt.give); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	long := strings.Repeat("word ", 200) + "p@ss word"
	if got := red.snippet("  a\n\n b  " + long); !strings.HasPrefix(got, "a b word") || len([]rune(got)) != snippetLen+1 || strings.Contains(got, "p@ss") {
		t.Errorf("snippet: got %q, want collapsed, cut, redacted", got)
	}
	if got := newRedactor("").redact("x"); got != "x" {
		t.Errorf("empty secret: got %q, want x", got)
	}
}

func TestRecipeHosts(t *testing.T) {
	rc := &Recipe{Name: "r", Hosts: []string{"127.0.0.1", "*.example.com", "[::1]"}}
	tests := []struct {
		give string
		want string // "" allowed, else the place the error names
	}{
		{"http://127.0.0.1:4321/login?state=x", ""},
		{"https://signin.example.com/a", ""},
		{"https://a.b.EXAMPLE.com/", ""},
		{"http://[::1]:80/", ""},
		{"https://example.com/", "https://example.com"},
		{"https://evil.com/?next=signin.example.com", "https://evil.com"},
		{"https://signin.example.com.evil.com/", "https://signin.example.com.evil.com"},
		{"http://127.0.0.2:4321/login", "http://127.0.0.2:4321"},
		{"file:///etc/passwd", "a file: address"},
		{"javascript:alert(1)", "a javascript: address"},
		{"not a url", "a non-web address"},
	}
	for _, tt := range tests {
		err := rc.check(tt.give)
		var he *HostError
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("check(%q) = %v, want allowed", tt.give, err)
		case tt.want != "" && (!errors.As(err, &he) || he.Where != tt.want):
			t.Errorf("check(%q) = %v, want a HostError for %q", tt.give, err, tt.want)
		}
	}
}
