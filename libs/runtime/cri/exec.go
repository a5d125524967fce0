package cri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/internal/capped"
)

// exitStatus is what the exec errors of cri-client and client-go carry
// for a command that ran and failed.
type exitStatus interface{ ExitStatus() int }

// Exec implements runtime.Runtime: ExecSync, or with stdin the streaming
// Exec endpoint of the runtime (no terminal). A command that ran reports
// its exit code; one that could not run or timed out is an error.
func (r *Runtime) Exec(ctx context.Context, uid types.UID, name string, cmd []string, stdin io.Reader, timeout time.Duration) (runtime.ExecResult, error) {
	if len(cmd) == 0 {
		return runtime.ExecResult{}, errors.New("cri: exec needs a command")
	}
	c, err := r.find(uid, name, false)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	if c.State != runtime.StateRunning {
		return runtime.ExecResult{}, fmt.Errorf("cri: exec: container %q of pod %s is not running", name, uid)
	}
	var in []byte
	if stdin != nil {
		if in, err = io.ReadAll(io.LimitReader(stdin, capped.Limit)); err != nil {
			return runtime.ExecResult{}, fmt.Errorf("cri: exec: read stdin: %w", err)
		}
	}
	if len(in) > 0 {
		return r.execStream(ctx, r.rawID(c.ID), cmd, bytes.NewReader(in), timeout)
	}
	// CRI's timeout is in whole seconds; 0 would mean none.
	if timeout > 0 && timeout < time.Second {
		timeout = time.Second
	}
	stdout, stderr, err := r.rs.ExecSync(ctx, r.rawID(c.ID), cmd, timeout)
	res := runtime.ExecResult{Stdout: stdout, Stderr: stderr}
	if err != nil {
		var es exitStatus
		if errors.As(err, &es) {
			res.ExitCode = es.ExitStatus()
			return res, nil
		}
		return res, fmt.Errorf("cri: exec %q in container %q: %w", cmd[0], name, err)
	}
	return res, nil
}

// ExecURL implements runtime.Streamer: the runtime's Exec call, whose answer
// is a one-time URL of its streaming server. containerd serves it on
// 127.0.0.1 by default (stream_server_address), so whoever proxies a client
// to it must run on the node's host.
func (r *Runtime) ExecURL(ctx context.Context, uid types.UID, name string, cmd []string, tty, stdin, stdout, stderr bool) (string, error) {
	if len(cmd) == 0 {
		return "", errors.New("cri: exec needs a command")
	}
	id, stderr, err := r.streamTarget(uid, name, "exec", tty, stdin, stdout, stderr)
	if err != nil {
		return "", err
	}
	resp, err := r.rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: cmd, Tty: tty, Stdin: stdin, Stdout: stdout, Stderr: stderr})
	if err != nil {
		return "", fmt.Errorf("cri: exec %q: %w", cmd[0], err)
	}
	if resp.GetUrl() == "" {
		return "", fmt.Errorf("cri: exec %q: the runtime answered no stream URL", cmd[0])
	}
	return resp.GetUrl(), nil
}

// AttachURL implements runtime.Streamer: the runtime's Attach call.
func (r *Runtime) AttachURL(ctx context.Context, uid types.UID, name string, tty, stdin, stdout, stderr bool) (string, error) {
	id, stderr, err := r.streamTarget(uid, name, "attach", tty, stdin, stdout, stderr)
	if err != nil {
		return "", err
	}
	resp, err := r.rs.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Tty: tty, Stdin: stdin, Stdout: stdout, Stderr: stderr})
	if err != nil {
		return "", fmt.Errorf("cri: attach to %q: %w", name, err)
	}
	if resp.GetUrl() == "" {
		return "", fmt.Errorf("cri: attach to %q: the runtime answered no stream URL", name)
	}
	return resp.GetUrl(), nil
}

// PortForwardURL implements runtime.PortForwarder: the runtime's
// PortForward call for the pod's ready sandbox (kubelet: GetPortForward).
// containerd's stream server then dials each port the client names on
// localhost inside the sandbox's network namespace.
func (r *Runtime) PortForwardURL(ctx context.Context, uid types.UID, ports []int32) (string, error) {
	r.mu.Lock()
	id, name, namespace := "", "", ""
	if pd := r.pods[uid]; pd != nil {
		id, name, namespace = pd.sandboxID, pd.name, pd.namespace
	}
	r.mu.Unlock()
	if id == "" {
		// kubelet: GetPortForward's message, with format.PodDesc.
		return "", fmt.Errorf("failed to find sandboxID for pod %s_%s(%s)", name, namespace, uid)
	}
	resp, err := r.rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: id, Port: ports})
	if err != nil {
		return "", fmt.Errorf("cri: port-forward: %w", err)
	}
	if resp.GetUrl() == "" {
		return "", errors.New("cri: port-forward: the runtime answered no stream URL")
	}
	return resp.GetUrl(), nil
}

// streamTarget is the runtime's ID of the running container a stream goes
// to, and whether stderr is asked for.
func (r *Runtime) streamTarget(uid types.UID, name, what string, tty, stdin, stdout, stderr bool) (string, bool, error) {
	c, err := r.find(uid, name, false)
	if err != nil {
		return "", false, err
	}
	if c.State != runtime.StateRunning {
		return "", false, fmt.Errorf("cri: %s: container %q of pod %s is not running", what, name, uid)
	}
	// kubelet: with a terminal, stderr is part of it (remotecommand's
	// NewOptions drops stderr when tty is set).
	if tty {
		stderr = false
	}
	if !stdin && !stdout && !stderr {
		return "", false, fmt.Errorf("cri: %s: you must specify at least 1 of stdin, stdout, stderr", what)
	}
	return r.rawID(c.ID), stderr, nil
}

// execStream runs cmd through the runtime's streaming server (SPDY), stdin
// attached, stdout and stderr apart.
func (r *Runtime) execStream(ctx context.Context, id string, cmd []string, stdin io.Reader, timeout time.Duration) (runtime.ExecResult, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	resp, err := r.rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: cmd, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return runtime.ExecResult{}, fmt.Errorf("cri: exec %q: %w", cmd[0], err)
	}
	u, err := url.Parse(resp.GetUrl())
	if err != nil {
		return runtime.ExecResult{}, fmt.Errorf("cri: exec %q: the runtime's stream URL: %w", cmd[0], err)
	}
	ex, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u)
	if err != nil {
		return runtime.ExecResult{}, fmt.Errorf("cri: exec %q: %w", cmd[0], err)
	}
	var stdout, stderr capped.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout, Stderr: &stderr})
	res := runtime.ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if err != nil {
		var es exitStatus
		if errors.As(err, &es) {
			res.ExitCode = es.ExitStatus()
			return res, nil
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return res, fmt.Errorf("cri: exec %q: timed out after %s", cmd[0], timeout)
		}
		return res, fmt.Errorf("cri: exec %q: %w", cmd[0], err)
	}
	return res, nil
}

var (
	_ runtime.Streamer      = (*Runtime)(nil)
	_ runtime.PortForwarder = (*Runtime)(nil)
)
