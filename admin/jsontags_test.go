package admin

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/pool/cluster"
	"github.com/poolgate/poolgate/pool/route"
)

// answerTypes are the types the admin API marshals as answers.
var answerTypes = []any{
	health{}, route.Snapshot{}, route.ProbeResult{}, bundleJSON{}, startAnswer{}, rawModels{},
	ReloadReport{}, UsageAnswer{}, RequestsAnswer{}, cluster.Status{}, Limits{},
}

// Every field of every struct an admin answer holds has a json tag: a field
// without one comes out under its Go name (ID, Name), which no client
// expects and a rename would silently change.
func TestAdminAnswersHaveJSONTags(t *testing.T) {
	seen := map[reflect.Type]bool{}
	for _, v := range answerTypes {
		checkTags(t, reflect.TypeOf(v), reflect.TypeOf(v).String(), seen)
	}
}

func checkTags(t *testing.T, typ reflect.Type, path string, seen map[reflect.Type]bool) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array || typ.Kind() == reflect.Map {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct || seen[typ] || typ == reflect.TypeOf(time.Time{}) {
		return
	}
	seen[typ] = true
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, ok := f.Tag.Lookup("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case f.Anonymous && name == "":
			// Embedded: its fields are the answer's own.
		case !ok || name == "":
			t.Errorf("%s.%s has no json tag", path, f.Name)
		}
		if name != "-" {
			checkTags(t, f.Type, path+"."+f.Name, seen)
		}
	}
}
