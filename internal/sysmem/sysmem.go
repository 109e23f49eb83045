// Package sysmem tells how much memory this process may use: its control
// group's limit when one is set (cgroup v2 memory.max, v1
// memory.limit_in_bytes), else the machine's (MemTotal in /proc/meminfo).
// cmd/poolgate/internal/daemon sizes the settings that default to a share of the memory
// from it (the body budget). It is a leaf: it imports nothing of poolgate's.
package sysmem

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
)

// Limit returns the bytes this process may use and where the figure comes
// from; 0 and "" when nothing could be read (not Linux).
func Limit() (int64, string) { return limit(os.DirFS("/")) }

// limit reads the figures from fsys, a view of the root file system.
func limit(fsys fs.FS) (int64, string) {
	total, from := memTotal(fsys), "/proc/meminfo MemTotal"
	cg, _ := fs.ReadFile(fsys, "proc/self/cgroup")
	for _, line := range strings.Split(string(cg), "\n") {
		// "0::/path" (v2) or "4:memory:/path" (v1).
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var files []string
		switch {
		case parts[0] == "0" && parts[1] == "":
			files = []string{path.Join("sys/fs/cgroup", parts[2], "memory.max"), "sys/fs/cgroup/memory.max"}
		case strings.Contains(","+parts[1]+",", ",memory,"):
			files = []string{path.Join("sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"),
				"sys/fs/cgroup/memory/memory.limit_in_bytes"}
		}
		for _, f := range files {
			if n := readBytes(fsys, f); n > 0 && (total == 0 || n < total) {
				total, from = n, "/"+f
			}
		}
	}
	if total == 0 {
		return 0, ""
	}
	return total, from
}

// readBytes reads a control group's limit file: a number of bytes, or
// "max" (no limit, 0 here).
func readBytes(fsys fs.FS, name string) int64 {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// memTotal is the machine's memory in bytes, 0 when unknown.
func memTotal(fsys fs.FS) int64 {
	f, err := fsys.Open("proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
