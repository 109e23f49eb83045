package tokens

import (
	"strings"
	"testing"
)

func TestMemoCountsLikeCount(t *testing.T) {
	m := NewMemo()
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	tests := []struct {
		name string
		give string
	}{
		{"short", "hello world"},
		{"long", long},
		{"long again (remembered)", long},
		{"long, one byte more", long + "!"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := m.Count(tt.give), Count(tt.give); got != want {
				t.Errorf("Memo.Count = %d, want %d", got, want)
			}
		})
	}
}

func BenchmarkMemoLongRepeated(b *testing.B) {
	m := NewMemo()
	s := strings.Repeat("func Handle(w http.ResponseWriter, r *http.Request) { return }\n", 1600) // ~100 KB
	m.Count(s)
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		m.Count(s)
	}
}

func BenchmarkCountLong(b *testing.B) {
	s := strings.Repeat("func Handle(w http.ResponseWriter, r *http.Request) { return }\n", 1600)
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		Count(s)
	}
}
