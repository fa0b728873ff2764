package pipeline

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a child process that a test starts, kills (SIGKILL) and starts again with the
// same command. It keeps the tail of its output across runs and notices when a run ends
// without being killed (a crash of its own, which tests report).
type Process struct {
	// Name is for messages.
	Name string
	// Command returns the command of a new run; its Stdout and Stderr are set by Start.
	Command func() *exec.Cmd

	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{}
	killed     bool
	runs       int
	unexpected []string // how runs that nobody killed ended
	out        tailBuffer
}

// Start starts a new run. The child gets SIGKILL if the test binary dies.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s: already running", p.Name)
		}
	}
	cmd := p.Command()
	cmd.Stdout = &p.out
	cmd.Stderr = &p.out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	p.runs++
	p.out.Write(fmt.Appendf(nil, "---- %s run %d, pid %d, %s\n", p.Name, p.runs, cmd.Process.Pid, time.Now().Format(time.StampMilli)))
	done := make(chan struct{})
	p.cmd, p.done, p.killed = cmd, done, false
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		if !p.killed {
			p.unexpected = append(p.unexpected, fmt.Sprintf("run %d (pid %d) ended by itself: %v", p.runs, cmd.Process.Pid, err))
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Kill sends SIGKILL to the current run and waits until it is gone.
func (p *Process) Kill() {
	p.signal(syscall.SIGKILL)
}

// Stop sends SIGTERM and waits (up to 10 s, then SIGKILL).
func (p *Process) Stop() {
	p.signal(syscall.SIGTERM)
}

func (p *Process) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		return
	}
	p.killed = true
	p.mu.Unlock()
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Runs is how many runs were started.
func (p *Process) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// Unexpected lists the runs that ended without Kill or Stop.
func (p *Process) Unexpected() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.unexpected...)
}

// Output is the tail of everything the runs wrote.
func (p *Process) Output() string { return p.out.String() }

// tailBuffer keeps the last 256 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if b.buf.Len() > 512<<10 {
		keep := b.buf.Bytes()[b.buf.Len()-256<<10:]
		b.buf = *bytes.NewBuffer(append([]byte(nil), keep...))
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Environ returns the environment of a worker with cfg.
func Environ(cfg WorkerConfig) []string {
	return append(os.Environ(), WorkerEnv+"="+mustJSON(cfg))
}
