package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// A section is a driver's settings under its name: a struct type the
// driver defines and registers (Register), so that this package names no
// driver. Its keys are KEY under the section's own, its environment
// variables POOLGATE_<SECTION>_<KEY>, and the flat key <section>_<key>
// that came before sections is still read.
//
// The file, the environment and the docs see a section as if it were a
// struct field of Config at the place of Config.Sections: the reflection
// below walks that shape (a struct type built from Config's fields with
// Sections replaced by one field per registered section), so every key
// reads, errs and documents as it did when the section was a field.

// registered are the sections, in the order they were registered.
var registered struct {
	sync.Mutex
	names []string
	make  map[string]func() any
}

// Register adds the section name, made by section: a pointer to a struct
// holding the section's defaults, whose fields carry yaml tags (its keys)
// and trailing comments (their documentation), with an optional
// Validate() []error naming each bad key as section.KEY. The table of
// worker kinds registers each kind's section before any configuration is
// read. Registering a name twice replaces the first.
func Register(name string, section func() any) {
	if p := reflect.TypeOf(section()); p.Kind() != reflect.Pointer || !isSection(p.Elem()) {
		panic(fmt.Sprintf("config: section %s is a %s, not a pointer to a struct", name, p))
	}
	registered.Lock()
	defer registered.Unlock()
	if registered.make == nil {
		registered.make = map[string]func() any{}
	}
	if _, ok := registered.make[name]; !ok {
		registered.names = append(registered.names, name)
	}
	registered.make[name] = section
}

// sectionDefaults returns a fresh value of every registered section, by
// name, each a pointer to its struct.
func sectionDefaults() map[string]any {
	registered.Lock()
	defer registered.Unlock()
	out := make(map[string]any, len(registered.names))
	for _, n := range registered.names {
		out[n] = registered.make[n]()
	}
	return out
}

// sectionNames returns the registered sections' names, in order.
func sectionNames() []string {
	registered.Lock()
	defer registered.Unlock()
	return append([]string(nil), registered.names...)
}

// isSection reports whether a field of type t is a section.
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Time]()
}

// sectionsField is the index of Config.Sections, where the sections sit
// in the shape.
var sectionsField = func() int {
	f, _ := reflect.TypeFor[Config]().FieldByName("Sections")
	return f.Index[0]
}()

// shapeField is one field of the shape: a field of Config (index into
// Config) or a section (its name).
type shapeField struct {
	config  int
	section string
}

// shape returns the struct type the configuration reads as, and where
// each of its fields comes from.
func shape() (reflect.Type, []shapeField) {
	t := reflect.TypeFor[Config]()
	var fields []reflect.StructField
	var from []shapeField
	for i := range t.NumField() {
		if i != sectionsField {
			fields = append(fields, t.Field(i))
			from = append(from, shapeField{config: i})
			continue
		}
		defs := sectionDefaults()
		for j, name := range sectionNames() {
			fields = append(fields, reflect.StructField{Name: fmt.Sprintf("Section%d", j),
				Type: reflect.TypeOf(defs[name]).Elem(), Tag: reflect.StructTag(`yaml:"` + name + `"`)})
			from = append(from, shapeField{config: -1, section: name})
		}
	}
	for i := range fields {
		fields[i].Index, fields[i].Offset = nil, 0
	}
	return reflect.StructOf(fields), from
}

// view returns an addressable copy of c in the shape; store writes one
// back.
func (c *Config) view() reflect.Value {
	typ, from := shape()
	v := reflect.New(typ).Elem()
	cv := reflect.ValueOf(c).Elem()
	for i, f := range from {
		if f.section == "" {
			v.Field(i).Set(cv.Field(f.config))
		} else if s, ok := c.Sections[f.section]; ok {
			v.Field(i).Set(reflect.ValueOf(s).Elem())
		}
	}
	return v
}

// store writes a view of c (from view) back into c.
func (c *Config) store(v reflect.Value) {
	_, from := shape()
	cv := reflect.ValueOf(c).Elem()
	sections := make(map[string]any, len(c.Sections))
	for i, f := range from {
		if f.section == "" {
			cv.Field(f.config).Set(v.Field(i))
			continue
		}
		p := reflect.New(v.Field(i).Type())
		p.Elem().Set(v.Field(i))
		sections[f.section] = p.Interface()
	}
	c.Sections = sections
}

// Section returns the value of the section whose key is name (a worker
// kind's configuration section, the struct, not a pointer to it), nil when
// none is registered under that name.
func (c Config) Section(name string) any {
	s, ok := c.Sections[name]
	if !ok {
		return nil
	}
	return reflect.ValueOf(s).Elem().Interface()
}

// ByKey returns each top-level key's value: a setting's own, or a
// section's (its struct) under the section's name. For comparing and
// rendering configurations key by key.
func (c Config) ByKey() map[string]any {
	v := c.view()
	out := make(map[string]any, v.NumField())
	for i := range v.NumField() {
		out[v.Type().Field(i).Tag.Get("yaml")] = v.Field(i).Interface()
	}
	return out
}

// Keys returns every configuration key, sorted: a section's keys are
// SECTION.KEY (their environment variables POOLGATE_SECTION_KEY, as
// EnvName spells them). For the tests that hold the docs and the examples
// to the settings the daemon reads.
func Keys() []string { return slices.Sorted(maps.Keys(keyPaths())) }

// keyPaths maps every configuration key (a section's as SECTION.KEY) to
// the index path of its field in the shape.
func keyPaths() map[string][]int {
	t, _ := shape()
	paths := map[string][]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		key := f.Tag.Get("yaml")
		if !isSection(f.Type) {
			paths[key] = []int{i}
			continue
		}
		for j := range f.Type.NumField() {
			paths[key+"."+f.Type.Field(j).Tag.Get("yaml")] = []int{i, j}
		}
	}
	return paths
}

// sectionErrors validates each section that has a Validate method (a
// driver's own checks of its settings, each error naming its key).
func (c *Config) sectionErrors() []error {
	var errs []error
	for _, name := range sectionNames() {
		if s, ok := c.Section(name).(interface{ Validate() []error }); ok {
			errs = append(errs, s.Validate()...)
		}
	}
	return errs
}

// SetSectionKey sets the section key (section.KEY) to val, which must be
// of the field's type; an error when no registered section has the key.
func (c *Config) SetSectionKey(key string, val any) error {
	name, sub, _ := strings.Cut(key, ".")
	s, ok := c.Sections[name]
	if !ok {
		return fmt.Errorf("%s: no %s section (its driver is not built in)", key, name)
	}
	v := reflect.ValueOf(s).Elem()
	for i := range v.NumField() {
		if v.Type().Field(i).Tag.Get("yaml") == sub {
			v.Field(i).Set(reflect.ValueOf(val))
			return nil
		}
	}
	return fmt.Errorf("%s: the %s section has no key %s", key, name, sub)
}

// envFields maps each environment variable to the index path of its field
// in the shape: a section's fields are POOLGATE_<SECTION>_<KEY>.
func envFields() map[string][]int {
	byEnv := map[string][]int{}
	for key, path := range keyPaths() {
		byEnv[EnvName(key)] = path
	}
	return byEnv
}

// nestFlatKeys moves each flat section key of a config mapping
// (section_key) under its section (section: key:), and returns a
// note for each, naming where it goes. A key set both ways is an error.
func nestFlatKeys(m *yaml.Node) ([]string, error) {
	if m.Kind != yaml.MappingNode {
		return nil, nil
	}
	t, _ := shape()
	var notes []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !isSection(f.Type) {
			continue
		}
		name := f.Tag.Get("yaml")
		sub := map[string]bool{}
		for j := range f.Type.NumField() {
			sub[f.Type.Field(j).Tag.Get("yaml")] = true
		}
		section := mappingValue(m, name)
		kept := m.Content[:0]
		var moved []*yaml.Node
		for k := 0; k+1 < len(m.Content); k += 2 {
			key, val := m.Content[k], m.Content[k+1]
			if rest, ok := strings.CutPrefix(key.Value, name+"_"); ok && sub[rest] {
				if section != nil && mappingValue(section, rest) != nil {
					return nil, fmt.Errorf("%s and %s.%s are both set: keep %s.%s", key.Value, name, rest, name, rest)
				}
				notes = append(notes, fmt.Sprintf("config key %s read as %s.%s; write it under %s:", key.Value, name, rest, name))
				moved = append(moved, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: rest}, val)
				continue
			}
			kept = append(kept, key, val)
		}
		m.Content = kept
		if len(moved) == 0 {
			continue
		}
		if section == nil {
			section = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, section)
		}
		section.Content = append(section.Content, moved...)
	}
	return notes, nil
}

// mappingValue returns the value of key in mapping m, nil when absent.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for k := 0; k+1 < len(m.Content); k += 2 {
		if m.Content[k].Value == key {
			return m.Content[k+1]
		}
	}
	return nil
}
