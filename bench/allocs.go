package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// allocBudget is the Go benchmark of the whole handler path in one process
// (cmd/poolgate/internal/daemon's BenchmarkRequestPath): allocations and bytes per request,
// without the inbound connection, against the same simulated worker.
type allocBudget struct {
	name          string
	nsPerOp       float64
	bytes, allocs int64
	budgetAllocs  int64
	budgetBytes   int64
}

// Budgets of the handler path: today's figures with a little room, so that
// a change that adds allocations to every request shows as missed.
var allocBudgets = map[string][2]int64{ // allocs, bytes
	"non-stream":        {200, 28 << 10},
	"stream 100 events": {330, 36 << 10},
	// With tracing on (spans exported to a loopback OTLP receiver).
	"non-stream traced":        {300, 40 << 10},
	"stream 100 events traced": {420, 48 << 10},
}

// runAllocBudget runs BenchmarkRequestPath with -benchmem against bin.
func runAllocBudget(ctx context.Context, bin string, n int) ([]allocBudget, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "./cmd/poolgate/internal/daemon", "-run", "^$", "-bench", "RequestPath",
		"-benchmem", "-benchtime", strconv.Itoa(n)+"x", "-count", "1")
	cmd.Env = append(cleanEnv(), "POOLGATE_TEST_BIN="+bin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go test -bench RequestPath: %w\n%s", err, out.String())
	}
	return parseBenchOutput(out.Bytes())
}

// parseBenchOutput reads the BenchmarkRequestPath lines of go test output:
//
//	BenchmarkRequestPath/non-stream-2   3000   329464 ns/op   26253 B/op   197 allocs/op
func parseBenchOutput(b []byte) ([]allocBudget, error) {
	var out []allocBudget
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 || !strings.HasPrefix(f[0], "BenchmarkRequestPath/") || f[3] != "ns/op" || f[5] != "B/op" || f[7] != "allocs/op" {
			continue
		}
		name := strings.TrimPrefix(f[0], "BenchmarkRequestPath/")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // the GOMAXPROCS suffix
		}
		name = strings.ReplaceAll(name, "_", " ")
		ns, err1 := strconv.ParseFloat(f[2], 64)
		bytes, err2 := strconv.ParseInt(f[4], 10, 64)
		allocs, err3 := strconv.ParseInt(f[6], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("benchmark line %q", sc.Text())
		}
		bud := allocBudgets[name]
		out = append(out, allocBudget{name: name, nsPerOp: ns, bytes: bytes, allocs: allocs,
			budgetAllocs: bud[0], budgetBytes: bud[1]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no BenchmarkRequestPath results in:\n%s", b)
	}
	return out, nil
}

// met says whether the figures are within the budget.
func (a allocBudget) met() bool {
	return a.budgetAllocs > 0 && a.allocs <= a.budgetAllocs && a.bytes <= a.budgetBytes
}

func (a allocBudget) target() []string {
	v := "missed"
	if a.met() {
		v = "met"
	}
	return []string{fmt.Sprintf("allocation budget, %s request through the handler path: <= %d allocs, <= %s",
		a.name, a.budgetAllocs, fmtBytes(uint64(a.budgetBytes))),
		fmt.Sprintf("%d allocs, %s", a.allocs, fmtBytes(uint64(a.bytes))), v}
}
