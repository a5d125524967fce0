package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/internal/capped"
)

// Exec implements runtime.Runtime: cmd runs as a child with the running
// container's environment and working directory, in a process group of its
// own that is killed when the command exits or the timeout passes.
func (r *Runtime) Exec(ctx context.Context, uid types.UID, name string, cmd []string, stdin io.Reader, timeout time.Duration) (runtime.ExecResult, error) {
	if len(cmd) == 0 {
		return runtime.ExecResult{}, errors.New("process: exec needs a command")
	}
	r.Mu.Lock()
	c, err := r.Table.Find(uid, name, false)
	if err != nil {
		r.Mu.Unlock()
		return runtime.ExecResult{}, err
	}
	running := c.status.State == runtime.StateRunning
	env, dir, user := c.env, c.dir, c.user
	r.Mu.Unlock()
	if !running {
		return runtime.ExecResult{}, fmt.Errorf("process: exec: container %q of pod %s is not running", name, uid)
	}
	path, err := lookPath(cmd[0], env, dir)
	if err != nil {
		return runtime.ExecResult{}, fmt.Errorf("process: exec in container %q: %w", name, err)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var stdout, stderr capped.Buffer
	ec := exec.CommandContext(ctx, path)
	ec.Args = cmd
	ec.Env = env
	ec.Dir = dir
	ec.Stdin = stdin
	ec.Stdout = &stdout
	ec.Stderr = &stderr
	ec.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: credential(user)}
	ec.Cancel = func() error { return syscall.Kill(-ec.Process.Pid, syscall.SIGKILL) }
	ec.WaitDelay = time.Second
	runErr := start(ec)
	if runErr == nil {
		r.record(ec.Process.Pid, string(uid), name)
		runErr = ec.Wait()
	}
	if ec.Process != nil {
		// What the command left behind in its group goes with it.
		_ = syscall.Kill(-ec.Process.Pid, syscall.SIGKILL)
		r.reapGroup(ec.Process.Pid)
		r.unrecord(ec.Process.Pid)
	}
	res := runtime.ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if err := ctx.Err(); err != nil && runErr != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return res, fmt.Errorf("process: exec %q: timed out after %s: %w", cmd[0], timeout, err)
		}
		return res, fmt.Errorf("process: exec %q: %w", cmd[0], err)
	}
	if ec.ProcessState == nil {
		return res, fmt.Errorf("process: exec %q: %w", cmd[0], runErr)
	}
	var ee *exec.ExitError
	if runErr != nil && !errors.As(runErr, &ee) && !errors.Is(runErr, exec.ErrWaitDelay) {
		return res, fmt.Errorf("process: exec %q: %w", cmd[0], runErr)
	}
	res.ExitCode = exitCode(ec.ProcessState)
	return res, nil
}
