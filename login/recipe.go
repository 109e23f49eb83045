package login

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Recipe is a declarative login: steps run in order against the worker's
// login page, and failure markers that, when they show up while a step
// waits, end the attempt with the page's own error text.
type Recipe struct {
	// Name is the key accounts use to pick the recipe (from the file's map).
	Name string `yaml:"-"`
	// Description is free text for people.
	Description string `yaml:"description"`
	// PasswordEnv names an environment variable with the password, used when
	// the account has none.
	PasswordEnv string `yaml:"password_env"`
	// PasswordFile names a file with the password (trailing newline
	// trimmed), used when the account has none and PasswordEnv is unset.
	PasswordFile string `yaml:"password_file"`
	// Hosts are the hosts the login may visit: exact names ("127.0.0.1",
	// "signin.example.com") or "*.example.com" for every subdomain. The
	// login URL the worker hands out, and every page the account's password
	// is typed into, must be on one of them; anything else ends the attempt.
	// The worker is trusted with its own account only, so a login URL it
	// makes up must not take the password anywhere. Required.
	Hosts []string `yaml:"hosts"`
	// Steps run in order.
	Steps []Step `yaml:"steps"`
	// Failure lists what, on the page, means the login was refused.
	Failure []Failure `yaml:"failure"`
}

// Step is one recipe step. Exactly one of the action keys (open, wait, type,
// click, choose, wait_url, wait_text) is set; the other fields qualify it.
type Step struct {
	// Open navigates: "login_url" (the URL the worker handed out) or an
	// absolute http(s) URL.
	Open string `yaml:"open"`
	// Wait waits until an element matching this CSS selector is visible. A
	// selector list ("a, b") waits for whichever comes first.
	Wait string `yaml:"wait"`
	// Type types into the element matching this selector: the account's
	// Field, or the literal Text.
	Type string `yaml:"type"`
	// Click clicks the element matching this selector.
	Click string `yaml:"click"`
	// Choose clicks the first visible element matching this selector whose
	// text contains Text (case-insensitive), or the first one when Text is
	// empty: an organisation or account picker.
	Choose string `yaml:"choose"`
	// WaitURL waits until the page URL matches this regular expression.
	WaitURL string `yaml:"wait_url"`
	// WaitText waits until the page's visible text contains this text.
	WaitText string `yaml:"wait_text"`

	// Field is what type enters: "username" or "password".
	Field string `yaml:"field"`
	// Text is type's literal text, or choose's text to match.
	Text string `yaml:"text"`
	// If runs the step only when an element matches this selector at that
	// moment (no waiting), so one recipe can serve page variants.
	If string `yaml:"if"`
	// Timeout overrides the runner's StepTimeout for this step.
	Timeout time.Duration `yaml:"timeout"`

	urlRE *regexp.Regexp
}

// Failure is one failure marker: a CSS selector whose visible element's text
// becomes the error, or a text that the page shows.
type Failure struct {
	Selector string `yaml:"selector"`
	Text     string `yaml:"text"`
}

// Step actions.
const (
	actOpen     = "open"
	actWait     = "wait"
	actType     = "type"
	actClick    = "click"
	actChoose   = "choose"
	actWaitURL  = "wait_url"
	actWaitText = "wait_text"
)

// openLoginURL is the value of open that means the worker's login URL.
const openLoginURL = "login_url"

// action returns the step's action and its argument.
func (s *Step) action() (string, string, error) {
	var act, arg string
	n := 0
	for _, a := range [...]struct{ name, v string }{
		{actOpen, s.Open}, {actWait, s.Wait}, {actType, s.Type}, {actClick, s.Click},
		{actChoose, s.Choose}, {actWaitURL, s.WaitURL}, {actWaitText, s.WaitText},
	} {
		if a.v != "" {
			act, arg = a.name, a.v
			n++
		}
	}
	if n != 1 {
		return "", "", errors.New("a step needs exactly one of open, wait, type, click, choose, wait_url, wait_text")
	}
	return act, arg, nil
}

// validate checks one step and compiles its pattern.
func (s *Step) validate() error {
	act, arg, err := s.action()
	if err != nil {
		return err
	}
	if s.Field != "" && act != actType {
		return fmt.Errorf("%s: field only goes with type", act)
	}
	if s.Text != "" && act != actType && act != actChoose {
		return fmt.Errorf("%s: text only goes with type or choose", act)
	}
	if s.Timeout < 0 {
		return fmt.Errorf("%s: negative timeout", act)
	}
	switch act {
	case actOpen:
		if arg != openLoginURL && !strings.HasPrefix(arg, "http://") && !strings.HasPrefix(arg, "https://") {
			return fmt.Errorf("open: %q is neither login_url nor an http(s) URL", arg)
		}
	case actType:
		if (s.Field == "") == (s.Text == "") {
			return errors.New("type: needs exactly one of field and text")
		}
		if s.Field != "" && s.Field != "username" && s.Field != "password" {
			return fmt.Errorf("type: field %q is neither username nor password", s.Field)
		}
	case actWaitURL:
		re, err := regexp.Compile(arg)
		if err != nil {
			return fmt.Errorf("wait_url: %w", err)
		}
		s.urlRE = re
	}
	return nil
}

func (r *Recipe) validate() error {
	if len(r.Steps) == 0 {
		return errors.New("no steps")
	}
	if len(r.Hosts) == 0 {
		return errors.New("hosts: list the hosts the login may visit (the login page's, e.g. \"*.example.com\")")
	}
	for _, h := range r.Hosts {
		if strings.Trim(strings.TrimPrefix(h, "*."), "abcdefghijklmnopqrstuvwxyz0123456789.-:[]ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" || h == "" || h == "*." {
			return fmt.Errorf("hosts: %q is not a host name (no scheme, port or path; \"*.\" only as a prefix)", h)
		}
	}
	if r.PasswordEnv != "" && r.PasswordFile != "" {
		return errors.New("password_env and password_file are exclusive")
	}
	for i := range r.Steps {
		if err := r.Steps[i].validate(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	for i, f := range r.Failure {
		if (f.Selector == "") == (f.Text == "") {
			return fmt.Errorf("failure %d: needs exactly one of selector and text", i+1)
		}
	}
	return nil
}

// recipeFile is the YAML document: recipes by name.
type recipeFile struct {
	Recipes map[string]*Recipe `yaml:"recipes"`
}

// ParseRecipes decodes a recipe document strictly (unknown keys are errors)
// and validates every recipe. An empty document has no recipes.
func ParseRecipes(b []byte) (map[string]*Recipe, error) {
	var f recipeFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	for name, r := range f.Recipes {
		if r == nil {
			return nil, fmt.Errorf("recipe %q is empty", name)
		}
		r.Name = name
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("recipe %q: %w", name, err)
		}
	}
	if f.Recipes == nil {
		f.Recipes = map[string]*Recipe{}
	}
	return f.Recipes, nil
}

//go:embed recipes/*.yaml
var builtinFS embed.FS

// BuiltinRecipes returns the recipes that ship with poolgate (recipes/):
// "simworker" (the bundled simulator, every login page variant) and the
// drivers' default recipes, which their kinds name (best effort, not
// verified against the live sites).
func BuiltinRecipes() (map[string]*Recipe, error) {
	entries, err := builtinFS.ReadDir("recipes")
	if err != nil {
		return nil, err
	}
	all := map[string]*Recipe{}
	for _, e := range entries {
		b, err := builtinFS.ReadFile(path.Join("recipes", e.Name()))
		if err != nil {
			return nil, err
		}
		rs, err := ParseRecipes(b)
		if err != nil {
			return nil, fmt.Errorf("built-in %s: %w", e.Name(), err)
		}
		maps.Copy(all, rs)
	}
	return all, nil
}

// loadRecipes returns the built-in recipes with the file's merged over them.
func loadRecipes(file string) (map[string]*Recipe, error) {
	all, err := BuiltinRecipes()
	if err != nil {
		return nil, err
	}
	if file == "" {
		return all, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("recipe file: %w", err)
	}
	rs, err := ParseRecipes(b)
	if err != nil {
		return nil, fmt.Errorf("recipe file %s: %w", file, err)
	}
	maps.Copy(all, rs)
	return all, nil
}

// HostError is a page the recipe does not allow: the login ends there.
type HostError struct {
	Recipe string
	// Where is the page's scheme and host (never its path or query, which
	// may carry tokens).
	Where string
}

// Error says where the login was taken.
func (e *HostError) Error() string {
	return "the login was taken to " + e.Where + ", which recipe " + e.Recipe + " does not list in hosts"
}

// check returns a *HostError unless raw is an http(s) URL on one of the
// recipe's hosts.
func (r *Recipe) check(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		where := "a non-web address"
		if err == nil && u.Scheme != "" {
			where = "a " + u.Scheme + ": address"
		}
		return &HostError{Recipe: r.Name, Where: where}
	}
	host := strings.ToLower(u.Hostname())
	for _, h := range r.Hosts {
		h = strings.ToLower(h)
		if sub, ok := strings.CutPrefix(h, "*."); ok {
			if strings.HasSuffix(host, "."+sub) {
				return nil
			}
		} else if strings.Trim(h, "[]") == host {
			return nil
		}
	}
	return &HostError{Recipe: r.Name, Where: u.Scheme + "://" + u.Host}
}

// password returns the account's password, else the recipe's
// password_env or password_file.
func (r *Recipe) password(account string, getenv func(string) string) (string, error) {
	switch {
	case account != "":
		return account, nil
	case r.PasswordEnv != "":
		if p := getenv(r.PasswordEnv); p != "" {
			return p, nil
		}
		return "", fmt.Errorf("recipe %s: password_env %s is empty", r.Name, r.PasswordEnv)
	case r.PasswordFile != "":
		b, err := os.ReadFile(r.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("recipe %s: password_file: %w", r.Name, err)
		}
		if p := strings.TrimRight(string(b), "\r\n"); p != "" {
			return p, nil
		}
		return "", fmt.Errorf("recipe %s: password_file %s is empty", r.Name, r.PasswordFile)
	}
	return "", nil
}
