package probe

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ExecOutcome is what the runtime reports of a command run in a container.
type ExecOutcome struct {
	// Output is stdout followed by stderr.
	Output []byte
	// ExitCode of the command, when it ran.
	ExitCode int
	// Error is set when the command could not be run or did not finish
	// (the runtime's own words).
	Error string
}

// Runner runs a command in a container's context and waits at most
// timeout for it. An error means the runtime could not be asked at all
// (no replica answers); ErrTimedOut means it was asked and no answer came.
type Runner interface {
	RunInContainer(ctx context.Context, cmd []string, timeout time.Duration) (*ExecOutcome, error)
}

// ErrTimedOut is the Runner's error for a command whose answer did not come
// in time.
var ErrTimedOut = errors.New("command timed out")

// Exec runs an exec action: exit code 0 is healthy; a non-zero exit code, a
// command that could not run or one that did not finish within timeout is a
// Failure. A runtime that cannot be reached gives Unknown with the error.
func Exec(ctx context.Context, r Runner, cmd []string, timeout time.Duration) (Result, string, error) {
	out, err := r.RunInContainer(ctx, cmd, timeout)
	switch {
	case errors.Is(err, ErrTimedOut):
		// kubelet rule: a timed-out exec probe is a failure, not an error.
		return Failure, fmt.Sprintf("command %q timed out after %v", cmd, timeout), nil
	case err != nil:
		return Unknown, "", err
	case out.Error != "":
		return Failure, out.Error, nil
	}
	text := out.Output
	if len(text) > maxOutput {
		text = text[:maxOutput]
	}
	if out.ExitCode != 0 {
		return Failure, string(text), nil
	}
	return Success, string(text), nil
}
