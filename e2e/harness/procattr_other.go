//go:build !linux

package harness

import "syscall"

// childAttr runs a child as cred (nil: as the test's user). Outside Linux there is no
// parent-death signal: a child outlives a test binary that dies without its cleanups.
func childAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
