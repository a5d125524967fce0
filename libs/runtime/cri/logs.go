package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/crilog"
)

// podFields are a pod's log fields and more key/value pairs.
func podFields(p *corev1.Pod, kv ...string) []zap.Field {
	f := logging.Pod(p.Namespace, p.Name, string(p.UID))
	for i := 0; i+1 < len(kv); i += 2 {
		f = append(f, zap.String(kv[i], kv[i+1]))
	}
	return f
}

// find returns the newest instance of the named container of the pod, or
// with previous the one before it.
func (r *Runtime) find(uid types.UID, name string, previous bool) (runtime.ContainerStatus, error) {
	return runtime.FindInstance(uid, r.PodContainers(uid), func(c runtime.ContainerStatus) string { return c.Name }, name, previous)
}

// Logs implements runtime.Runtime: the CRI log file of the instance.
func (r *Runtime) Logs(ctx context.Context, uid types.UID, name string, opts runtime.LogOptions, w io.Writer) error {
	c, err := r.find(uid, name, opts.Previous)
	if err != nil {
		return err
	}
	if c.LogPath == "" {
		return fmt.Errorf("cri: container %q of pod %s has no log file", name, uid)
	}
	var live crilog.Live
	if c.State != runtime.StateExited {
		live = &liveLog{r: r, id: r.rawID(c.ID), every: r.opts.poll / 4}
	}
	err = crilog.ReadFile(ctx, c.LogPath, opts, live, w)
	// a running container's log is briefly missing while it is rotated
	// (renamed, not yet reopened): read it once it is back.
	for i := 0; live != nil && errors.Is(err, fs.ErrNotExist) && i < 20; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		err = crilog.ReadFile(ctx, c.LogPath, opts, live, w)
	}
	return err
}

// liveLog follows a log the CRI runtime writes: there is no notice of a
// write, so Changed fires after a short wait, and the log is done once the
// container has exited.
type liveLog struct {
	r     *Runtime
	id    string
	every time.Duration
	// exited is set by Done and read on the next Done: the log is over
	// one read after the exit was seen, so that what the runtime wrote
	// last is read.
	exited bool
}

func (l *liveLog) Changed() <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(l.every, func() { close(ch) })
	return ch
}

func (l *liveLog) Done() bool {
	if l.exited {
		return true
	}
	l.r.mu.Lock()
	in := l.r.byID[l.id]
	l.exited = in == nil || in.status.State == runtime.StateExited
	l.r.mu.Unlock()
	return false
}
