package main

import "testing"

func TestParseBenchOutput(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkRequestPath/non-stream-2         	    3000	    329464 ns/op	   26253 B/op	     197 allocs/op
BenchmarkRequestPath/stream_100_events-2  	    3000	   2208978 ns/op	   32656 B/op	     310 allocs/op
PASS
`)
	got, err := parseBenchOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].name != "non-stream" || got[0].allocs != 197 || got[0].bytes != 26253 ||
		got[1].name != "stream 100 events" || got[1].allocs != 310 || got[1].budgetAllocs == 0 {
		t.Errorf("parseBenchOutput = %+v, want non-stream 197 allocs 26253 B and stream 100 events 310 allocs with a budget", got)
	}
	if _, err := parseBenchOutput([]byte("FAIL\n")); err == nil {
		t.Error("parseBenchOutput of output without results: no error, want one")
	}
}

func TestKindOf(t *testing.T) {
	tests := []struct {
		give, want string
	}{
		{"internal/runtime/syscall/linux.Syscall6", "syscalls"},
		{"runtime.futex", "scheduler"},
		{"runtime.mallocgc", "GC+alloc"},
		{"runtime.copystack", "stacks"},
		{"runtime.memequal", "runtime other"},
		{"net/http.(*conn).serve", "net/http+net"},
		{"encoding/json.(*decodeState).object", "JSON"},
		{"github.com/poolgate/poolgate/pool.(*Router).forward", "poolgate"},
		{"github.com/gin-gonic/gin.(*Context).Next", "other"},
	}
	for _, tt := range tests {
		if got := kindOf(tt.give); got != tt.want {
			t.Errorf("kindOf(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		give []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{9, 1, 5}, 5},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.give); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestOwnFrame(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"github.com/poolgate/poolgate/pool.(*Router).forward", true},
		{"github.com/poolgate/poolgate/handlers.(*edge).answer", false},
		{"github.com/poolgate/poolgate/handlers.New.RequestID.func1", false},
		{"encoding/json.(*Decoder).Decode", true},
		{"github.com/redis/go-redis/v9.(*Script).Run", true},
		{"net/http.(*conn).serve", false},
		{"github.com/poolgate/poolgate/handlers/anthropic.(*Handler).CountTokens", false},
		{"github.com/poolgate/poolgate/handlers/relay.(*Relay).Collect", true},
		{"github.com/poolgate/poolgate/pool.(*Router).attempt.func1", false},
	}
	for _, tt := range tests {
		if got := ownFrame(tt.give); got != tt.want {
			t.Errorf("ownFrame(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}
