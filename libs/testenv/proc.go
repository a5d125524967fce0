package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// process is a child process whose output goes to a file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttrs()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail returns the end of the process's log, for error messages.
func (p *process) tail() string {
	data, _ := os.ReadFile(p.log)
	if len(data) > 3000 {
		data = data[len(data)-3000:]
	}
	return string(bytes.TrimSpace(data))
}

// stop sends SIGTERM, then SIGKILL after the timeout, and waits.
func (p *process) stop(timeout time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitFor polls check until it succeeds, the process exits or ctx ends.
func (p *process) waitFor(ctx context.Context, what string, check func() error) error {
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before %s: %v\n%s", p.name, what, p.err, p.tail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s not reached: %v (last: %v)\n%s", p.name, what, ctx.Err(), last, p.tail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
