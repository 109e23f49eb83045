package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat. It
// is 100 on every Linux architecture Go supports (sysconf(_SC_CLK_TCK) needs
// cgo), so CPU times here have 10 ms resolution: blocks run long enough for
// that to be a few percent at most.
const clockTick = 10 * time.Millisecond

// parseStat returns utime+stime of a /proc/<pid>/stat line: the CPU the
// process itself used (its children are cutime/cstime, not counted).
func parseStat(b []byte) (time.Duration, error) {
	// The command name (field 2) is in parentheses and may itself contain
	// spaces and parentheses: the fields that follow start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat: no ')' after the command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so utime (14) and stime (15) are f[11], f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	utime, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat utime: %w", err)
	}
	stime, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat stime: %w", err)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// memInfo is a process's resident memory from /proc/<pid>/status.
type memInfo struct {
	// RSS is VmRSS, resident now; HWM is VmHWM, the peak resident size over
	// the process's life. Both in bytes.
	RSS, HWM int64
}

// parseStatus reads VmRSS and VmHWM out of /proc/<pid>/status text.
func parseStatus(b []byte) (memInfo, error) {
	var m memInfo
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("status %s: unexpected value %q", key, val)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("status %s: %w", key, err)
		}
		if key == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.HWM = kb << 10
		}
		seen++
	}
	if seen != 2 {
		return m, errors.New("status: VmRSS or VmHWM missing (is the process a zombie?)")
	}
	return m, nil
}

// procCPU returns the CPU time pid has used so far.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(b)
}

// procMem returns pid's resident memory now and at its peak.
func procMem(pid int) (memInfo, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memInfo{}, err
	}
	return parseStatus(b)
}

// parseLoadavg returns the 1-minute load average from /proc/loadavg text.
func parseLoadavg(b []byte) (float64, error) {
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, fmt.Errorf("loadavg: %q", b)
	}
	return strconv.ParseFloat(f[0], 64)
}

// loadavg returns the 1-minute load average, or -1 when it can't be read.
func loadavg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	l, err := parseLoadavg(b)
	if err != nil {
		return -1
	}
	return l
}

// raiseNoFile lifts the open-file limit to its hard maximum: the 5,000-stream
// scenario holds two sockets per stream in the gateway and one in the
// harness, and the gateway and its workers inherit the limit.
func raiseNoFile() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, err
		}
	}
	return l.Cur, nil
}
