package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// develVersion is the version of a build that recorded none: go run, or a build from a
// tree without its version control data (a docker build context without .git, or
// -buildvcs=false).
const develVersion = "devel"

// linkedVersion, when set at link time (go build -ldflags "-X main.linkedVersion=v1.2.3", as
// the Dockerfile does from its VERSION build argument), is the version, whatever the
// toolchain recorded: a docker build context has no .git to record one from.
var linkedVersion string

// buildVersion is the version of this binary: linkedVersion if set, else what the Go
// toolchain recorded (see versionOf).
func buildVersion() string {
	if linkedVersion != "" {
		return linkedVersion
	}
	info, ok := debug.ReadBuildInfo()
	return versionOf(info, ok)
}

// versionOf reads the version out of what the toolchain recorded: the main module's
// version when there is one (v1.2.3 from go install ...@v1.2.3, or the pseudo-version that
// go build derives from the repository's tag and commit, "+dirty" when the tree had
// uncommitted changes), else the commit (vcs.revision, its first 12 digits, "-dirty" when
// vcs.modified), else develVersion.
func versionOf(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return develVersion
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var revision string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision == "" {
		return develVersion
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if modified {
		revision += "-dirty"
	}
	return revision
}

// goVersion is the Go release this binary was built with.
func goVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.GoVersion != "" {
		return info.GoVersion
	}
	return runtime.Version()
}

// versionCommand is "coordinator version" and "coordinator --version": one line with the
// build's version, the Go release and the platform. It takes no argument.
func versionCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "coordinator version: unexpected argument %q\nRun 'coordinator --help' for usage.\n", strings.Join(args, " "))
		return exitUsage
	}
	fmt.Fprintf(stdout, "coordinator %s %s %s/%s\n", buildVersion(), goVersion(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}
