package doctor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// listeners are the sockets a process group listens on: TCP ports and Unix
// socket paths.
type listeners struct {
	ports []int
	unix  []string
}

// errNoProc means the host has no /proc to read listeners from.
var errNoProc = errors.New("this host has no /proc (Linux only)")

// listening reads, from /proc, what the processes of group pgid listen on.
func listening(pgid int) (listeners, error) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		return listeners{}, errNoProc
	}
	inodes := map[string]bool{}
	for _, pid := range groupPids(pgid) {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	var out listeners
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		out.ports = append(out.ports, tcpListening(f, inodes)...)
	}
	out.unix = unixListening(inodes)
	slices.Sort(out.ports)
	out.ports = slices.Compact(out.ports)
	slices.Sort(out.unix)
	return out, nil
}

// groupPids lists the processes whose process group is pgid.
func groupPids(pgid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parens.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
			out = append(out, pid)
		}
	}
	return out
}

// tcpListening reads the listening ports of the sockets in inodes from a
// /proc/net/tcp table (state 0A is LISTEN).
func tcpListening(path string, inodes map[string]bool) []int {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 || fl[3] != "0A" || !inodes[fl[9]] {
			continue
		}
		_, port, ok := strings.Cut(fl[1], ":")
		if p, err := strconv.ParseInt(port, 16, 32); ok && err == nil {
			out = append(out, int(p))
		}
	}
	return out
}

// unixListening reads the paths of the listening Unix sockets in inodes
// from /proc/net/unix (flag 00010000 is SO_ACCEPTCON).
func unixListening(inodes map[string]bool) []string {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 8 || fl[3] != "00010000" || !inodes[fl[6]] {
			continue
		}
		out = append(out, fl[7])
	}
	return out
}
