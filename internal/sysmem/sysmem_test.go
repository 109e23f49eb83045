package sysmem

import (
	"testing"
	"testing/fstest"
)

func TestLimit(t *testing.T) {
	meminfo := &fstest.MapFile{Data: []byte("MemTotal:       24683620 kB\nMemFree: 1 kB\n")}
	tests := []struct {
		name     string
		give     fstest.MapFS
		want     int64
		wantFrom string
	}{
		{"machine only", fstest.MapFS{"proc/meminfo": meminfo}, 24683620 << 10, "/proc/meminfo MemTotal"},
		{"cgroup v2 limit", fstest.MapFS{"proc/meminfo": meminfo, "proc/self/cgroup": {Data: []byte("0::/pg\n")},
			"sys/fs/cgroup/pg/memory.max": {Data: []byte("536870912\n")}}, 512 << 20, "/sys/fs/cgroup/pg/memory.max"},
		{"cgroup v2 without a limit", fstest.MapFS{"proc/meminfo": meminfo, "proc/self/cgroup": {Data: []byte("0::/\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte("max\n")}}, 24683620 << 10, "/proc/meminfo MemTotal"},
		{"cgroup v1 limit", fstest.MapFS{"proc/meminfo": meminfo, "proc/self/cgroup": {Data: []byte("5:cpu:/\n4:memory:/c1\n")},
			"sys/fs/cgroup/memory/c1/memory.limit_in_bytes": {Data: []byte("1073741824\n")}}, 1 << 30,
			"/sys/fs/cgroup/memory/c1/memory.limit_in_bytes"},
		{"cgroup v1 without a limit", fstest.MapFS{"proc/meminfo": meminfo, "proc/self/cgroup": {Data: []byte("4:memory:/\n")},
			"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")}}, 24683620 << 10, "/proc/meminfo MemTotal"},
		{"nothing", fstest.MapFS{}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, from := limit(tt.give)
			if got != tt.want || from != tt.wantFrom {
				t.Errorf("limit() = %d from %q, want %d from %q", got, from, tt.want, tt.wantFrom)
			}
		})
	}
}
