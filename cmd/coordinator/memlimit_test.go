package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "512MiB": 512 << 20, "2 GiB": 2 << 30, "1KiB": 1024} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5GiB", "12MB", "lots", "99999999999TiB"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q): no error", in)
		}
	}
}

func TestContainerMemoryLimit(t *testing.T) {
	t.Parallel()
	write := func(dir, file, content string) {
		p := filepath.Join(dir, file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v2 := t.TempDir()
	write(v2, "memory.max", "536870912\n")
	if n, ok := containerMemoryLimit(v2); !ok || n != 512<<20 {
		t.Errorf("cgroup v2 limit: %d, %v", n, ok)
	}
	unlimited := t.TempDir()
	write(unlimited, "memory.max", "max\n")
	if _, ok := containerMemoryLimit(unlimited); ok {
		t.Error("memory.max = max read as a limit")
	}
	v1 := t.TempDir()
	write(v1, "memory/memory.limit_in_bytes", "9223372036854771712\n") // v1's "no limit"
	if _, ok := containerMemoryLimit(v1); ok {
		t.Error("cgroup v1's unlimited read as a limit")
	}
	write(v1, "memory/memory.limit_in_bytes", "1073741824\n")
	if n, ok := containerMemoryLimit(v1); !ok || n != 1<<30 {
		t.Errorf("cgroup v1 limit: %d, %v", n, ok)
	}
	if _, ok := containerMemoryLimit(t.TempDir()); ok {
		t.Error("no cgroup files read as a limit")
	}
}
