package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func TestDropped(t *testing.T) {
	var d Dropped
	d.Add("a")
	d.AddSet("b", json.RawMessage(`{"x":1}`))
	d.AddSet("c", nil)
	d.AddSet("c", json.RawMessage(`null`))
	d.Add("a")
	if got := d.Fields(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("fields %v, want [a b]", got)
	}
	var counted []string
	d.Report(context.Background(), nil, func(protocol, field string) { counted = append(counted, protocol+"/"+field) }, "p")
	if !slices.Equal(counted, []string{"p/a", "p/b"}) {
		t.Errorf("counted %v, want each field once", counted)
	}
}

func TestReadAllDeclaredLength(t *testing.T) {
	body := strings.Repeat("x", 1000)
	for _, n := range []int64{-1, 0, 10, 999, 1000, 1001, 5000} {
		got, err := readAll(iotest.OneByteReader(strings.NewReader(body)), n)
		if err != nil || string(got) != body {
			t.Errorf("declared %d: got %d bytes, %v; want the 1000 bytes", n, len(got), err)
		}
	}
	boom := errors.New("boom")
	if _, err := readAll(iotest.ErrReader(boom), 10); !errors.Is(err, boom) {
		t.Errorf("a failing reader gave %v, want %v", err, boom)
	}
}
