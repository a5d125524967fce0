package kubeletapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
)

// execOnBus runs a command in a container through runtime.exec.<p>.
func (s *Server) execOnBus(ctx context.Context, tg resolved, cmd []string, stdin []byte) (*bus.ExecResult, error) {
	uid := tg.uid
	req := &bus.ExecRequest{
		ContainerRef:   tg.ref(),
		Command:        cmd,
		Stdin:          stdin,
		TimeoutSeconds: int(s.reqTTL / time.Second),
	}
	rctx, cancel := context.WithTimeout(ctx, s.reqTTL+2*time.Second)
	defer cancel()
	subject := s.subj.Exec(s.partition(uid))
	e, err := s.cfg.Bus.Request(rctx, subject, bus.KindExecRequest, req)
	if err != nil {
		return nil, fmt.Errorf("no answer from the pod worker on %s: %w", subject, err)
	}
	res, err := bus.DecodeExecResult(e)
	if err != nil {
		return nil, err
	}
	if res.Error != "" {
		return nil, fmt.Errorf("%s", res.Error)
	}
	return res, nil
}

// ref names the resolved pod on the bus: its bus UID, and the namespace and name
// it was resolved by, which the pod worker checks against the pod it holds
// under that UID.
func (tg resolved) ref() bus.ContainerRef {
	return bus.ContainerRef{PodUID: types.UID(tg.uid), Namespace: tg.pod.Namespace, Pod: tg.pod.Name, Container: tg.container}
}

// handleRun serves POST /run/{namespace}/{pod}[/{uid}]/{container}?cmd=...:
// the kubelet's non-interactive run, answering with the command's output.
func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	tg, ok := s.lookup(w, r)
	if !ok {
		return
	}
	cmd := splitCommand(r.URL.Query().Get("cmd"))
	if len(cmd) == 0 {
		http.Error(w, "cmd: required", http.StatusBadRequest)
		return
	}
	res, err := s.execOnBus(r.Context(), tg, cmd, nil)
	if err != nil {
		s.log.Info("run in container failed", append(logging.Pod(tg.pod.Namespace, tg.pod.Name, tg.uid), zap.String("container", tg.container), zap.Error(err))...)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(res.Stdout)
	_, _ = w.Write(res.Stderr)
}

// splitCommand splits on spaces, as the kubelet's /run does.
func splitCommand(s string) []string {
	var out []string
	start := -1
	for i, c := range s {
		if c == ' ' {
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}
