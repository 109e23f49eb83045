package migrate

import (
	"maps"
	"reflect"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/poolgate/poolgate/internal/config"
)

// configYAML renders the settings that differ from poolgate's defaults.
func configYAML(cfg config.Config) ([]byte, error) {
	def := config.Defaults().ByKey()
	out := map[string]any{}
	for key, val := range cfg.ByKey() {
		if reflect.DeepEqual(val, def[key]) {
			continue
		}
		switch x := val.(type) {
		case time.Duration:
			out[key] = x.String()
		case config.APIKeys:
			out[key] = x.Secrets()
		case []config.Account:
			out[key] = accountsYAML(x)
		default:
			out[key] = x
		}
	}
	keys := slices.Sorted(maps.Keys(out))
	var doc yaml.Node
	doc.Kind = yaml.MappingNode
	for _, k := range keys {
		var val yaml.Node
		if err := val.Encode(out[k]); err != nil {
			return nil, err
		}
		doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, &val)
	}
	b, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, err
	}
	return append([]byte("# poolgate configuration made by `poolgate migrate` from the Python gateway's settings.\n"+
		"# It holds secrets: keep it private. Start with: poolgate -config FILE\n"), b...), nil
}

// accountsYAML keeps each account's set fields only, by their yaml keys.
func accountsYAML(accts []config.Account) []map[string]any {
	out := make([]map[string]any, 0, len(accts))
	for _, a := range accts {
		if a.PasswordEnv != "" || a.PasswordFile != "" {
			a.Password = "" // resolved from there at every start
		}
		m := map[string]any{}
		v := reflect.ValueOf(a)
		for i := range v.NumField() {
			key := v.Type().Field(i).Tag.Get("yaml")
			if f := v.Field(i); key != "-" && !f.IsZero() {
				m[key] = f.Interface()
			}
		}
		m["name"] = a.Name
		out = append(out, m)
	}
	return out
}
