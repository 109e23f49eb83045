package config

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the generated table of docs/configuration.md from the Config struct")

const (
	configDocPath = "../../docs/configuration.md"
	docBegin      = "<!-- BEGIN GENERATED: go test ./internal/config -run TestConfigDoc -update (edit internal/config/config.go, not this table) -->"
	docEnd        = "<!-- END GENERATED -->"
	regenerate    = "go test ./internal/config -run TestConfigDoc -update"
)

// TestConfigDoc holds docs/configuration.md's settings table to the Config
// struct: one row per field, its key from the yaml tag, its meaning from
// the field's trailing comment, its default from Defaults(), whether a
// reload applies it from Reloadable. After adding or changing a setting,
// regenerate the page with -update.
func TestConfigDoc(t *testing.T) {
	table := configTable(t)
	b, err := os.ReadFile(configDocPath)
	if err != nil {
		t.Fatalf("%v: the configuration page is missing", err)
	}
	page := string(b)
	i, j := strings.Index(page, docBegin), strings.Index(page, docEnd)
	if i < 0 || j < i {
		t.Fatalf("docs/configuration.md has no generated block: put the lines\n%s\n%s\nwhere the table goes, then run %s", docBegin, docEnd, regenerate)
	}
	want := page[:i+len(docBegin)] + "\n" + table + page[j:]
	if *update {
		if err := os.WriteFile(configDocPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != page {
		t.Errorf("docs/configuration.md does not match the Config struct (%s); run\n\t%s\n(or make docs) and commit the page", firstDiff(page, want), regenerate)
	}
}

// A setting's trailing comment is its documentation: the page is built
// from it, so a field without one is an error.
func TestEverySettingHasAComment(t *testing.T) {
	for _, f := range configFields(t) {
		if f.comment == "" {
			t.Errorf("Config field %s (%s) has no trailing comment: say what it means and its default", f.name, f.key)
		}
	}
}

// The account and API key fields are documented by hand in
// docs/configuration.md; each must be there.
func TestConfigDocListsAccountAndKeyFields(t *testing.T) {
	b, err := os.ReadFile(configDocPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[Account](), reflect.TypeFor[APIKey]()} {
		for i := range typ.NumField() {
			k := typ.Field(i).Tag.Get("yaml")
			if k == "-" || k == "" {
				continue
			}
			if !strings.Contains(string(b), "| `"+k+"` |") {
				t.Errorf("docs/configuration.md has no table row for the %s field %q", typ.Name(), k)
			}
		}
	}
}

type fieldDoc struct {
	name, key, comment string
	// index is the field's index path in Config (a section's field has
	// two); typ is its type.
	index []int
	typ   reflect.Type
}

// configFields reads Config's fields, in order, with their yaml keys and
// trailing comments, from config.go's syntax tree; the registered sections
// stand in Sections' place, each for its own fields, read from its
// package's source, each keyed SECTION.KEY. index is the field's path in
// the shape (view).
func configFields(t *testing.T) []fieldDoc {
	t.Helper()
	typ, from := shape()
	docs := structDoc(t, ".", "Config")
	var out []fieldDoc
	for i, src := range from {
		sf := typ.Field(i)
		if src.section == "" {
			f := docs[src.config]
			out = append(out, fieldDoc{name: f.name, key: f.key, comment: f.comment, index: []int{i}, typ: sf.Type})
			continue
		}
		dir := "../../" + strings.TrimPrefix(sf.Type.PkgPath(), "github.com/poolgate/poolgate/")
		for j, sub := range structDoc(t, dir, sf.Type.Name()) {
			out = append(out, fieldDoc{name: "Sections[" + src.section + "]." + sub.name, key: src.section + "." + sub.key,
				comment: sub.comment, index: []int{i, j}, typ: sf.Type.Field(j).Type})
		}
	}
	return out
}

// structDoc reads the fields of the struct type name, declared in the Go
// files of dir, with their yaml keys and trailing comments, in order.
func structDoc(t *testing.T, dir, name string) []fieldDoc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []fieldDoc
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || ts.Name.Name != name {
				return true
			}
			for _, fl := range ts.Type.(*ast.StructType).Fields.List {
				tag, _ := strconv.Unquote(fl.Tag.Value)
				key := reflect.StructTag(tag).Get("yaml")
				comment := ""
				if fl.Comment != nil {
					comment = strings.TrimSpace(fl.Comment.Text())
				}
				for _, id := range fl.Names {
					out = append(out, fieldDoc{name: id.Name, key: key, comment: comment})
				}
			}
			return false
		})
	}
	if len(out) == 0 {
		t.Fatalf("no struct %s in %s", name, dir)
	}
	return out
}

// configTable renders the settings table.
func configTable(t *testing.T) string {
	t.Helper()
	// The data dir's default is the user cache dir; show it as on Linux
	// with an ordinary home, not as on the machine that runs the test.
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "~")
	cfg := Defaults()
	def := cfg.view()
	var b strings.Builder
	b.WriteString("| key | environment | type | default | reload | meaning |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, f := range configFields(t) {
		meaning, stated := splitDefault(f.comment)
		dflt := formatDefault(f.key, def.FieldByIndex(f.index))
		if dflt == "" {
			dflt = zeroDefault(f.typ, stated)
		}
		reload := "restart"
		if Reloadable(f.key) {
			reload = "live"
		}
		// A pipe would end the cell: regular expressions have them.
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s | %s |\n", f.key, EnvName(f.key), typeName(f.key, f.typ),
			strings.ReplaceAll(dflt, "|", `\|`), reload, strings.ReplaceAll(meaning, "|", `\|`))
	}
	return b.String()
}

// splitDefault cuts a comment's trailing parenthesis, which states the
// default, from its meaning.
func splitDefault(comment string) (meaning, stated string) {
	comment = strings.TrimSpace(comment)
	if !strings.HasSuffix(comment, ")") {
		return comment, ""
	}
	i := strings.LastIndex(comment, " (")
	if i < 0 {
		return comment, ""
	}
	return comment[:i], comment[i+2 : len(comment)-1]
}

// formatDefault renders a non-zero default; "" for a zero value.
func formatDefault(key string, v reflect.Value) string {
	if v.IsZero() {
		if v.Kind() == reflect.Bool {
			return "`false`"
		}
		return ""
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		return "`" + shortDuration(x) + "`"
	case int64:
		if strings.HasSuffix(key, "_bytes") || strings.HasSuffix(key, "_bytes_per_key") {
			return fmt.Sprintf("`%d` (%d MiB)", x, x>>20)
		}
	case int:
		if strings.HasSuffix(key, "_bytes") {
			return fmt.Sprintf("`%d` (%d MiB)", x, x>>20)
		}
	}
	return fmt.Sprintf("`%v`", v.Interface())
}

// zeroDefault says what a zero value means, from the comment's "("" = X)",
// "(0 = X)" or "(none = X)", or its plain statement.
func zeroDefault(typ reflect.Type, stated string) string {
	if zero, what, ok := strings.Cut(stated, " = "); ok {
		if zero == "0" {
			return "`0`: " + what
		}
		if what == "none" {
			return "(none)"
		}
		return "(none: " + what + ")"
	}
	if stated != "" {
		return "(" + stated + ")"
	}
	if typ.Kind() == reflect.Int || typ.Kind() == reflect.Int64 {
		return "`0`"
	}
	return "(none)"
}

func shortDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	case d%time.Minute == 0 && d >= 2*time.Minute && d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d%time.Second == 0 && d < 2*time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	}
	return d.String()
}

// typeName is how a value is written, in YAML and in the environment.
func typeName(key string, typ reflect.Type) string {
	switch {
	case typ == reflect.TypeFor[APIKeys]():
		return "keys: comma list or JSON list"
	case typ == reflect.TypeFor[time.Duration]():
		return "duration"
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.String:
		return "list (env: comma-separated)"
	case typ.Kind() == reflect.Slice:
		return "list (env: JSON)"
	case typ.Kind() == reflect.Map:
		return "map (env: JSON object)"
	case typ.Kind() == reflect.Int, typ.Kind() == reflect.Int64:
		return "integer"
	}
	return typ.Kind().String()
}

// firstDiff names the first line where two texts differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d is\n\t%s\nwant\n\t%s", i+1, gl, wl)
		}
	}
	return "no line differs"
}
