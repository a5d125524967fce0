package kubeletapi

// /portForward carries `kubectl port-forward`: the kubelet's port-forward
// protocol (portforward.k8s.io over SPDY, or v4.channel.k8s.io over
// WebSocket), which the runtime's streaming server speaks. nodehb asks the
// pod's worker for the runtime's port-forward URL of the pod's sandbox
// (runtime.stream.<p>, portForward) and proxies the client's connection
// there, as /exec does. A runtime without a streaming server (sim,
// process) forwards nothing: the request is refused.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
)

// portParam is the query parameter a WebSocket client names its ports in
// (kubelet: portforward.PortHeader).
const portParam = "port"

// handlePortForward serves /portForward/{namespace}/{pod}[/{uid}].
func (s *Server) handlePortForward(w http.ResponseWriter, r *http.Request) {
	ports, err := forwardPorts(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tg, ok := s.lookupPod(w, r)
	if !ok {
		return
	}
	target, err := s.portForwardURL(r.Context(), tg, ports)
	var unsupported *unsupportedError
	if errors.As(err, &unsupported) {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err != nil {
		s.log.Info("port-forward to pod failed", append(logging.Pod(tg.pod.Namespace, tg.pod.Name, tg.uid), zap.Error(err))...)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.proxyStream(w, r, target)
}

// forwardPorts are the ports a WebSocket client names up front (kubelet:
// portforward.NewV4Options): required, each in 1..65535, several in one
// value separated by commas. Over SPDY each stream names its port, and
// the query says nothing.
func forwardPorts(r *http.Request) ([]int32, error) {
	if !wsstream.IsWebSocketRequest(r) {
		return nil, nil
	}
	values := r.URL.Query()[portParam]
	if len(values) == 0 {
		return nil, fmt.Errorf("query parameter %q is required", portParam)
	}
	var ports []int32
	for _, v := range values {
		if v == "" {
			return nil, fmt.Errorf("query parameter %q cannot be empty", portParam)
		}
		for _, p := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("unable to parse %q as a port: %v", v, err)
			}
			if n < 1 {
				return nil, fmt.Errorf("port %q must be > 0", v)
			}
			ports = append(ports, int32(n))
		}
	}
	return ports, nil
}

// portForwardURL asks the pod's worker for the runtime's port-forward URL.
func (s *Server) portForwardURL(ctx context.Context, tg resolved, ports []int32) (*url.URL, error) {
	ref := tg.ref()
	ref.Container = ""
	req := &bus.StreamRequest{ContainerRef: ref, PortForward: true, Ports: ports}
	rctx, cancel := context.WithTimeout(ctx, s.reqTTL+2*time.Second)
	defer cancel()
	subject := s.subj.Stream(s.partition(tg.uid))
	e, err := s.cfg.Bus.Request(rctx, subject, bus.KindStreamRequest, req)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, &unsupportedError{fmt.Sprintf("port-forward: not supported by this agent: no pod worker serves streams on %s", subject)}
	}
	if err != nil {
		return nil, fmt.Errorf("no answer from the pod worker on %s: %w", subject, err)
	}
	res, err := bus.DecodeStreamResult(e)
	if err != nil {
		return nil, err
	}
	switch {
	case res.Unsupported:
		return nil, &unsupportedError{res.Error}
	case res.Error != "":
		return nil, errors.New(res.Error)
	}
	return parseStreamURL(res.URL)
}

// unsupportedError: the runtime forwards no ports (a 400, as for attach).
type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string { return e.msg }
