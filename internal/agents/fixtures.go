package agents

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
)

// TestdataDir is where the recorded requests live, relative to this
// package's directory.
const TestdataDir = "testdata"

//go:embed testdata
var testdata embed.FS

// Fixtures returns the recorded requests of c, in the order it sent them.
func Fixtures(c Client) ([]Exchange, error) {
	dir := path.Join(TestdataDir, c.Name)
	entries, err := fs.ReadDir(testdata, dir)
	if err != nil {
		return nil, fmt.Errorf("no recorded requests of %s (run make agents-capture): %w", c.Name, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	out := make([]Exchange, 0, len(names))
	for _, n := range names {
		b, err := testdata.ReadFile(path.Join(dir, n))
		if err != nil {
			return nil, err
		}
		var ex Exchange
		if err := json.Unmarshal(b, &ex); err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out = append(out, ex)
	}
	return out, nil
}
