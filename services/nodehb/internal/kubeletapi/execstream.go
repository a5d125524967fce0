package kubeletapi

// /exec speaks the kubelet's remote command protocol over SPDY (the
// channel.k8s.io family, v1 to v4), the way kube-apiserver talks to a kubelet
// for `kubectl exec` (a WebSocket client is translated to SPDY by the API
// server). Two ways, tried in order:
//
//   - Streamed (runtime.stream.<p>): when the runtime behind the pod worker
//     has a streaming server of its own (CRI), the pod worker answers with a
//     one-time URL of it and the client's connection is proxied there, as
//     the kubelet does: a terminal, stdin as typed, output as written,
//     resizes. containerd serves that URL on 127.0.0.1 by default, so nodehb
//     must run on the node's host (or in its network namespace) to reach it.
//   - Over the bus (runtime.exec.<p>), for runtimes without one (sim,
//     process): not interactive. Stdin, when asked for, is read to its end
//     before the command runs, its output is sent when it ends, and a TTY is
//     refused.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/splitlet/splitlet/libs/logging"
)

// streamCreationTimeout bounds the wait for the client's streams (kubelet
// default 30 s).
const streamCreationTimeout = 30 * time.Second

type execOptions struct {
	// attach: to the container's own process, no command.
	attach                 bool
	command                []string
	stdin, stdout, stderr  bool
	tty                    bool
	expectedStreamsPerExec int
}

func queryBool(q map[string][]string, key string) bool {
	v := q[key]
	if len(v) == 0 {
		return false
	}
	b, err := strconv.ParseBool(v[0])
	return err == nil && b
}

func parseExecOptions(r *http.Request) (*execOptions, error) {
	return parseStreamOptions(r, false)
}

func parseStreamOptions(r *http.Request, attach bool) (*execOptions, error) {
	q := r.URL.Query()
	o := &execOptions{
		attach:  attach,
		command: q["command"],
		stdin:   queryBool(q, "stdin") || queryBool(q, "input"),
		stdout:  queryBool(q, "stdout") || queryBool(q, "output"),
		stderr:  queryBool(q, "stderr") || queryBool(q, "error"),
		tty:     queryBool(q, "tty"),
	}
	if attach {
		o.command = nil
	} else if len(o.command) == 0 {
		return nil, fmt.Errorf("command: required")
	}
	if !o.stdin && !o.stdout && !o.stderr {
		return nil, fmt.Errorf("you must specify at least 1 of stdin, stdout, stderr")
	}
	if o.tty && o.stderr {
		// kubelet: remotecommand's NewOptions drops stderr under a terminal.
		o.stderr = false
	}
	return o, nil
}

type execStreams struct {
	errs   httpstream.Stream
	stdin  httpstream.Stream
	stdout httpstream.Stream
	stderr httpstream.Stream
}

// handleAttach serves /attach/{namespace}/{pod}[/{uid}]/{container}
// (`kubectl attach`): only through the runtime's streaming server, as there
// is no way to attach over the bus.
func (s *Server) handleAttach(w http.ResponseWriter, r *http.Request) {
	opts, err := parseStreamOptions(r, true)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tg, ok := s.lookup(w, r)
	if !ok {
		return
	}
	// kubelet: an attach has the terminal the container was started with,
	// whatever the client asks, since a running process cannot change it.
	opts.tty = containerTTY(tg.pod, tg.container)
	if opts.tty {
		opts.stderr = false
	}
	if handled, why := s.streamed(w, r, tg, opts, "attach to container failed"); !handled {
		http.Error(w, why, http.StatusBadRequest)
	}
}

// streamed asks the pod's worker for the runtime's stream URL and, when
// there is one, proxies the request there; a refusal is answered with the
// runtime's error. handled is false when the runtime has no streaming
// server, and why says so.
func (s *Server) streamed(w http.ResponseWriter, r *http.Request, tg resolved, opts *execOptions, failed string) (handled bool, why string) {
	target, why, err := s.streamURL(r.Context(), tg, opts)
	switch {
	case err != nil:
		s.log.Info(failed, append(logging.Pod(tg.pod.Namespace, tg.pod.Name, tg.uid), zap.String("container", tg.container), zap.Error(err))...)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return true, ""
	case target != nil:
		s.proxyStream(w, r, target)
		return true, ""
	}
	return false, why
}

// handleExec serves /exec/{namespace}/{pod}[/{uid}]/{container}.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	opts, err := parseExecOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tg, ok := s.lookup(w, r)
	if !ok {
		return
	}
	handled, why := s.streamed(w, r, tg, opts, "exec in container failed")
	if handled {
		return
	}
	if opts.tty {
		http.Error(w, why, http.StatusBadRequest)
		return
	}
	protocol, err := httpstream.Handshake(r, w, []string{
		remotecommand.StreamProtocolV4Name, remotecommand.StreamProtocolV3Name,
		remotecommand.StreamProtocolV2Name, remotecommand.StreamProtocolV1Name,
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	arrivals := make(chan createdStream, 8)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(st httpstream.Stream, reply <-chan struct{}) error {
		select {
		case arrivals <- createdStream{st, reply}:
		default:
			return fmt.Errorf("too many streams")
		}
		return nil
	})
	if conn == nil {
		return // the upgrader has answered
	}
	defer conn.Close()
	conn.SetIdleTimeout(4 * time.Hour)
	st, ok := s.awaitExecStreams(r.Context(), arrivals, opts, protocol)
	if !ok {
		return
	}
	s.runExec(r.Context(), tg, opts, st, protocol)
}

// createdStream is a stream the client created and the channel closed once
// its creation is acknowledged.
type createdStream struct {
	stream httpstream.Stream
	reply  <-chan struct{}
}

// awaitExecStreams collects the streams opts asks for (and the error
// stream) as the client creates them, within streamCreationTimeout; ok is
// false when they did not all come.
func (s *Server) awaitExecStreams(ctx context.Context, arrivals <-chan createdStream, opts *execOptions, protocol string) (st execStreams, ok bool) {
	want := 1 // the error stream
	for _, b := range []bool{opts.stdin, opts.stdout, opts.stderr} {
		if b {
			want++
		}
	}
	timeout := time.NewTimer(streamCreationTimeout)
	defer timeout.Stop()
	for got := 0; got < want; {
		select {
		case c := <-arrivals:
			select {
			case <-c.reply:
			case <-timeout.C:
				return st, false
			}
			switch c.stream.Headers().Get("streamType") {
			case "error":
				st.errs = c.stream
			case "stdin":
				st.stdin = c.stream
			case "stdout":
				st.stdout = c.stream
			case "stderr":
				st.stderr = c.stream
			case "resize":
				continue // no terminal, nothing to resize
			default:
				continue
			}
			got++
		case <-timeout.C:
			s.log.Info("exec: the client did not create its streams in time", zap.String("protocol", protocol))
			return st, false
		case <-ctx.Done():
			return st, false
		}
	}
	return st, true
}

// runExec reads the whole stdin, runs the command through the pod's worker
// and writes its output and exit status to the client's streams.
func (s *Server) runExec(ctx context.Context, tg resolved, opts *execOptions, st execStreams, protocol string) {
	var stdin []byte
	if st.stdin != nil {
		var err error
		if stdin, err = io.ReadAll(io.LimitReader(st.stdin, 16<<20)); err != nil {
			s.writeExecError(st.errs, protocol, fmt.Errorf("reading stdin: %w", err))
			return
		}
	}
	res, err := s.execOnBus(ctx, tg, opts.command, stdin)
	if err != nil {
		s.log.Info("exec in container failed", append(logging.Pod(tg.pod.Namespace, tg.pod.Name, tg.uid), zap.String("container", tg.container), zap.Error(err))...)
		s.writeExecError(st.errs, protocol, err)
		return
	}
	if st.stdout != nil {
		_, _ = st.stdout.Write(res.Stdout)
		_ = st.stdout.Close()
	}
	if st.stderr != nil {
		_, _ = st.stderr.Write(res.Stderr)
		_ = st.stderr.Close()
	}
	s.writeExecStatus(st.errs, protocol, res.ExitCode)
}

// writeExecStatus ends the exchange: from v4 a Status object (Success, or
// NonZeroExitCode with the code as a cause); before v4 only a failure is
// written, as text.
func (s *Server) writeExecStatus(errs httpstream.Stream, protocol string, code int) {
	if errs == nil {
		return
	}
	defer errs.Close()
	if protocol != remotecommand.StreamProtocolV4Name {
		if code != 0 {
			_, _ = fmt.Fprintf(errs, "command terminated with non-zero exit code: %d", code)
		}
		return
	}
	status := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess}
	if code != 0 {
		status = metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure,
			Reason:   remotecommand.NonZeroExitCodeReason,
			Message:  fmt.Sprintf("command terminated with non-zero exit code: %d", code),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{
				{Type: remotecommand.ExitCodeCauseType, Message: strconv.Itoa(code)},
			}},
		}
	}
	_ = json.NewEncoder(errs).Encode(&status)
}

// writeExecError reports a command that could not run at all.
func (s *Server) writeExecError(errs httpstream.Stream, protocol string, err error) {
	if errs == nil {
		return
	}
	defer errs.Close()
	if protocol != remotecommand.StreamProtocolV4Name {
		_, _ = io.WriteString(errs, err.Error())
		return
	}
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Reason:   metav1.StatusReasonInternalError,
		Message:  err.Error(),
	}
	_ = json.NewEncoder(errs).Encode(&status)
}
