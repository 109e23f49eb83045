package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// A section is a struct-typed field of Config that a driver defines (a
// driver's settings under its name): its keys are KEY under the
// section's own, its environment variables POOLGATE_<SECTION>_<KEY>, and
// the flat key <section>_<key> that came before sections is still read.

// isSection reports whether a field of type t is a section.
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Time]()
}

// Section returns the value of the section whose key is name (a worker
// kind's configuration section), nil when Config has none.
func (c Config) Section(name string) any {
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		if f := v.Type().Field(i); isSection(f.Type) && f.Tag.Get("yaml") == name {
			return v.Field(i).Interface()
		}
	}
	return nil
}

// Keys returns every configuration key, sorted: a section's keys are
// SECTION.KEY (their environment variables POOLGATE_SECTION_KEY, as
// EnvName spells them). For the tests that hold the docs and the examples
// to the settings the daemon reads.
func Keys() []string {
	t := reflect.TypeFor[Config]()
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		key := f.Tag.Get("yaml")
		if !isSection(f.Type) {
			keys = append(keys, key)
			continue
		}
		for j := range f.Type.NumField() {
			keys = append(keys, key+"."+f.Type.Field(j).Tag.Get("yaml"))
		}
	}
	sort.Strings(keys)
	return keys
}

// sectionErrors validates each section that has a Validate method (a
// driver's own checks of its settings, each error naming its key).
func (c *Config) sectionErrors() []error {
	var errs []error
	v := reflect.ValueOf(*c)
	for i := range v.NumField() {
		if !isSection(v.Type().Field(i).Type) {
			continue
		}
		if s, ok := v.Field(i).Interface().(interface{ Validate() []error }); ok {
			errs = append(errs, s.Validate()...)
		}
	}
	return errs
}

// envFields maps each environment variable to the index path of its field:
// a section's fields are POOLGATE_<SECTION>_<KEY>.
func envFields() map[string][]int {
	t := reflect.TypeFor[Config]()
	byEnv := map[string][]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		key := f.Tag.Get("yaml")
		if !isSection(f.Type) {
			byEnv[EnvName(key)] = []int{i}
			continue
		}
		for j := range f.Type.NumField() {
			byEnv[EnvName(key+"_"+f.Type.Field(j).Tag.Get("yaml"))] = []int{i, j}
		}
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
	t := reflect.TypeFor[Config]()
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
