package main

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    time.Duration
		wantErr bool
	}{
		{"plain", "4242 (poolgate) S 1 4242 4242 0 -1 4194560 2231 0 0 0 153 47 0 0 20 0 9 0 1234 1300000000 5800 " +
			"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0", 2 * time.Second, false},
		{"command with spaces and parens", "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 1 2 30 40 20 0 1 0 1 1 1", 30 * time.Millisecond, false},
		{"children not counted", "7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 999 999 20 0 1 0 1 1 1", 0, false},
		{"no parenthesis", "7 x S 1", 0, true},
		{"truncated", "7 (x) S 1 7 7 0", 0, true},
		{"not a number", "7 (x) S 1 7 7 0 -1 0 0 0 0 0 zz 2 0 0", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.give))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseStat = %s, %v; want %s, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

const sampleStatus = `Name:	poolgate
Umask:	0022
State:	S (sleeping)
Tgid:	4242
VmPeak:	 1846200 kB
VmSize:	 1846200 kB
VmHWM:	   53400 kB
VmRSS:	   23244 kB
RssAnon:	   12000 kB
Threads:	9
`

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    memInfo
		wantErr bool
	}{
		{"sample", sampleStatus, memInfo{RSS: 23244 << 10, HWM: 53400 << 10}, false},
		{"zombie has no Vm lines", "Name:\tx\nState:\tZ (zombie)\n", memInfo{}, true},
		{"unit other than kB", "VmHWM:\t1 MB\nVmRSS:\t1 kB\n", memInfo{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatus([]byte(tt.give))
			if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
				t.Errorf("parseStatus = %+v, %v; want %+v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// The parsers read this very process's /proc files.
func TestProcSelf(t *testing.T) {
	if _, err := procCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	m, err := procMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.HWM < m.RSS {
		t.Errorf("memory %+v: want 0 < RSS <= HWM", m)
	}
}

func TestParseLoadavgAndCPUModel(t *testing.T) {
	l, err := parseLoadavg([]byte("2.43 8.01 11.06 3/412 24990\n"))
	if err != nil || l != 2.43 {
		t.Errorf("loadavg %v, %v; want 2.43", l, err)
	}
	info := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
	if got := cpuModel([]byte(info)); got != "AMD EPYC 7B13" {
		t.Errorf("cpu model %q, want AMD EPYC 7B13", got)
	}
}

func TestReadSSE(t *testing.T) {
	tests := []struct {
		name       string
		give       string
		wantEvents int
		wantErr    bool
	}{
		{"complete", "data: {\"a\":1}\n\ndata: {\"a\":2}\n\n: keep-alive\n\ndata: [DONE]\n\n", 2, false},
		{"no space after colon", "data:{}\n\ndata:[DONE]\n\n", 1, false},
		{"cut short", "data: {}\n\ndata: {}\n", 2, true},
		{"long line", "data: " + strings.Repeat("x", 40<<10) + "\n\ndata: [DONE]\n\n", 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			firsts := 0
			o := readSSE(bufio.NewReaderSize(strings.NewReader(tt.give), 16<<10), func() { firsts++ })
			if o.events != tt.wantEvents || (o.err != nil) != tt.wantErr || firsts != 1 || o.firstByte.IsZero() {
				t.Errorf("events %d, err %v, first-event calls %d; want %d, error %v, 1", o.events, o.err, firsts,
					tt.wantEvents, tt.wantErr)
			}
		})
	}
}

func TestAffinityBodies(t *testing.T) {
	body := affinityBodies(4)
	var follow struct {
		Messages []struct{ Role, Content string }
	}
	if err := json.Unmarshal(body(2*10+1), &follow); err != nil {
		t.Fatal(err)
	}
	var first struct {
		Messages []struct{ Role, Content string }
	}
	if err := json.Unmarshal(body(2*(10-4)), &first); err != nil {
		t.Fatal(err)
	}
	if len(follow.Messages) != 3 || len(first.Messages) != 1 || follow.Messages[0] != first.Messages[0] ||
		follow.Messages[1].Role != "assistant" || follow.Messages[1].Content != "You said: "+first.Messages[0].Content {
		t.Errorf("follow-up %+v does not continue first turn %+v", follow.Messages, first.Messages)
	}
	if got := body(3); strings.Contains(string(got), "assistant") {
		t.Errorf("request 3 is a follow-up of a conversation before the first: %s", got)
	}
}

func TestPlotSVG(t *testing.T) {
	pts := []point{{c: 200, p50: 2 * time.Millisecond, p99: 9 * time.Millisecond}, {c: 1, p50: -50 * time.Microsecond, p99: 400 * time.Microsecond}}
	sortPoints(pts)
	svg := plotSVG(pts, "a < b")
	for _, want := range []string{"<svg", "</svg>", "a &lt; b", ">200</text>", ">p99</text>", "<polyline"} {
		if !strings.Contains(svg, want) {
			t.Errorf("plot lacks %q", want)
		}
	}
	if got := niceStep(9.05); got != 2 {
		t.Errorf("niceStep(9.05) = %v, want 2", got)
	}
}
