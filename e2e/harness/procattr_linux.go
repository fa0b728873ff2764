package harness

import "syscall"

// childAttr runs a child as cred (nil: as the test's user) and has the kernel kill it with
// SIGKILL when the test binary dies, so that no server outlives a crashed or timed-out test.
func childAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}
