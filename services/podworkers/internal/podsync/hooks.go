package podsync

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
)

// The Events of failed lifecycle hooks, as the kubelet records them: the
// message names no detail, so that nothing a hook printed (a secret) leaks
// into an Event.
const (
	EventFailedPostStartHook = "FailedPostStartHook"
	EventFailedPreStopHook   = "FailedPreStopHook"
)

// errPostStartHook is a start whose postStart hook failed (kubelet:
// ErrPostStartHook): the container was killed.
var errPostStartHook = errors.New("PostStartHookError")

// hookExecTimeout bounds a postStart exec hook, which the kubelet does not
// bound at all, so that a hook that never returns cannot hold its pod's
// worker forever.
const hookExecTimeout = 5 * time.Minute

// minPreStopGrace is what a preStop hook leaves of the grace period at
// least for the stop itself (kubelet: minimumGracePeriodInSeconds).
const minPreStopGrace = 2 * time.Second

// runHook runs a lifecycle handler of container c (kubelet:
// lifecycle.handlerRunner): exec through the runtime, httpGet against the
// pod IP (any response is a success, a connection that fails is not), or
// sleep. On failure it returns the kubelet's message for the log.
func (s *Syncer) runHook(ctx context.Context, pod *corev1.Pod, c *corev1.Container, h *corev1.LifecycleHandler, timeout time.Duration) (string, error) {
	switch {
	case h.Exec != nil:
		res, err := s.rt.Exec(ctx, pod.UID, c.Name, h.Exec.Command, nil, timeout)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("command '%s' exited with %d: %s", strings.Join(h.Exec.Command, " "), res.ExitCode, res.Stderr)
		}
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				h.Exec.Command, c.Name, podDesc(pod), err, string(res.Stdout)), err
		}
		return "", nil
	case h.HTTPGet != nil:
		if err := s.hookHTTP(ctx, pod, c, h.HTTPGet, timeout); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, c.Name, podDesc(pod), err), err
		}
		return "", nil
	case h.Sleep != nil:
		select {
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
			return "", nil
		case <-ctx.Done():
			err := ctx.Err()
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v", h.Sleep.Seconds, c.Name, podDesc(pod), err), err
		}
	}
	err := fmt.Errorf("invalid handler: %v", h)
	return fmt.Sprintf("Cannot run handler: %v", err), err
}

// hookUserAgent is the User-Agent of httpGet hooks (kubelet:
// kube-lifecycle/<major>.<minor>).
const hookUserAgent = "kube-lifecycle/" + kube.Release

// hookClient sends httpGet hooks. kubelet: an HTTPS hook does not verify
// the container's certificate (a pod's own, which no CA of the node's
// vouches for), as HTTPS probes do not; no connection is kept.
var hookClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet's rule for hooks
	DisableKeepAlives: true,
	Proxy:             nil,
}}

func (s *Syncer) hookHTTP(ctx context.Context, pod *corev1.Pod, c *corev1.Container, g *corev1.HTTPGetAction, timeout time.Duration) error {
	req, err := kube.HTTPGetRequest(g, c, s.rt.PodIP(pod), hookUserAgent)
	if err != nil {
		return err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	resp, err := hookClient.Do(req.WithContext(ctx))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.Body.Close()
}

// postStart runs the container's postStart hook, if it has one; when the
// hook fails the container is killed, a FailedPostStartHook Event recorded,
// and errPostStartHook returned (kubelet: startContainer, step 4).
func (s *Syncer) postStart(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id string) error {
	if c.Lifecycle == nil || c.Lifecycle.PostStart == nil {
		return nil
	}
	msg, err := s.runHook(ctx, pod, c, c.Lifecycle.PostStart, hookExecTimeout)
	if err == nil {
		return nil
	}
	s.log.Warn("postStart hook failed, killing the container", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)),
		zap.String("container", c.Name), zap.String("message", msg))...)
	s.event(pod, c.Name, corev1.EventTypeWarning, EventFailedPostStartHook, "PostStartHook failed")
	if err := s.rt.StopContainer(ctx, id, graceOf(pod)); err != nil {
		s.log.Warn("cannot kill the container", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.String("container", c.Name), zap.Error(err))...)
	}
	return errPostStartHook
}

// preStop runs the preStop hook of the named container, if it has one,
// and waits for it at most the grace period; it returns what is left of
// the grace for the stop (at least two seconds) and a release to call once
// the container is stopped. As in the kubelet (killContainer), a hook that
// outlasts the grace period is not cut short: it runs on until the stop
// kills its container, so a hook that never ends lives grace plus the
// stop's two seconds. A hook that fails records FailedPreStopHook.
func (s *Syncer) preStop(ctx context.Context, pod *corev1.Pod, name string, grace time.Duration) (time.Duration, func()) {
	c := containerSpec(pod, name)
	if c == nil || c.Lifecycle == nil || c.Lifecycle.PreStop == nil || grace <= 0 {
		return grace, func() {}
	}
	start := time.Now()
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// No timeout of its own: the container's stop ends an exec hook.
		msg, err := s.runHook(hctx, pod, c, c.Lifecycle.PreStop, 0)
		if err != nil {
			s.log.Warn("preStop hook failed", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)),
				zap.String("container", name), zap.String("message", msg))...)
			s.event(pod, name, corev1.EventTypeWarning, EventFailedPreStopHook, "PreStopHook failed")
		}
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
	return max(grace-time.Since(start), minPreStopGrace), cancel
}

// containerSpec finds a container of the pod by name, init containers too.
func containerSpec(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
