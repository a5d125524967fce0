package tcpprober

// A probe worker runs one probe of one container every period, as the
// kubelet's probe worker does, reduced to what a TCP-only prober needs:
//
//   - A new container ID resets the worker and publishes the initial result
//     (kubelet: readiness Failure, liveness Success, startup Unknown).
//   - A container that is not running counts as Failure.
//   - Until a container's startup probe has succeeded only the startup probe
//     runs; after that only liveness and readiness (kubelet: startup gating).
//   - Results count towards successThreshold / failureThreshold; a result is
//     published when the worker's result changes.
//   - A liveness Failure and a startup Failure hold the worker until the
//     container has a new ID (the pod workers restart it).
//   - While the pod is being deleted, liveness and startup report Success
//     once and stop (kubelet: no restarts during termination).
//
// Handlers: tcpSocket connects within the timeout; httpGet is checked as a
// TCP connect to the same host and port (no request is sent, so any HTTP
// status counts as Success); exec and grpc are not run and are reported as
// Unknown with a message saying so, which keeps a container unready (and, for
// a startup probe, not started) but never has it restarted.

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
)

type worker struct{ cancel context.CancelFunc }

// stop ends the worker; it returns at once (the runner waits for all).
func (w *worker) stop() { w.cancel() }

// startWorker starts the worker of one probe. r.mu is held.
func (r *Runner) startWorker(uid types.UID, k workerKey, probe *corev1.Probe) *worker {
	ctx, cancel := context.WithCancel(r.ctx)
	if ctx.Err() == nil {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.runWorker(ctx, uid, k, probe)
		}()
	}
	return &worker{cancel: cancel}
}

// result is a (container ID, outcome) pair the worker has decided.
type result struct {
	id      string
	outcome bus.ProbeOutcome
	message string
}

func initial(t bus.ProbeType) bus.ProbeOutcome {
	switch t {
	case bus.ProbeReadiness:
		return bus.ProbeFailure
	case bus.ProbeLiveness:
		return bus.ProbeSuccess
	}
	return bus.ProbeUnknown
}

func orDefault(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}

func (r *Runner) runWorker(ctx context.Context, uid types.UID, k workerKey, probe *corev1.Probe) {
	p := &probeRun{
		r: r, uid: uid, k: k, probe: probe,
		timeout:          time.Duration(orDefault(probe.TimeoutSeconds, 1)) * time.Second,
		successThreshold: int(orDefault(probe.SuccessThreshold, 1)),
		failureThreshold: int(orDefault(probe.FailureThreshold, 3)),
		initialDelay:     time.Duration(probe.InitialDelaySeconds) * time.Second,
	}
	period := time.Duration(orDefault(probe.PeriodSeconds, 10)) * time.Second
	ctx, finish := context.WithCancel(ctx)
	defer finish()
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		if !p.round(ctx) {
			finish()
		}
	}, period)
}

// probeRun is one worker's probe and where it stands.
type probeRun struct {
	r     *Runner
	uid   types.UID
	k     workerKey
	probe *corev1.Probe

	timeout                            time.Duration
	successThreshold, failureThreshold int
	initialDelay                       time.Duration

	id         string
	want, sent result
	run        int
	runOutcome bus.ProbeOutcome
	hold, done bool
}

// round is one period of the worker: look at the container, probe it if
// it is due, publish a changed result. It reports whether the worker goes
// on.
func (p *probeRun) round(ctx context.Context) bool {
	v, ok := p.r.look(p.uid, p.k)
	if !ok {
		return false
	}
	if v.containerID != p.id {
		p.id, p.hold, p.run, p.runOutcome = v.containerID, false, 0, ""
		if p.id != "" {
			p.want = result{id: p.id, outcome: initial(p.k.probe)}
		}
	}
	switch {
	case p.id == "" || p.hold:
	case v.running == nil:
		p.want = result{id: p.id, outcome: bus.ProbeFailure, message: "container is not running"}
	case v.deleting && p.k.probe != bus.ProbeReadiness:
		p.want, p.done = result{id: p.id, outcome: bus.ProbeSuccess}, true
	case p.k.probe == bus.ProbeStartup && v.started:
	case p.k.probe != bus.ProbeStartup && !v.started:
	case time.Since(v.running.StartedAt.Time) < p.initialDelay:
	default:
		outcome, msg := p.r.check(ctx, v, p.probe, p.timeout)
		if ctx.Err() != nil {
			return false
		}
		p.count(outcome, msg)
	}
	p.publish(ctx, v)
	return !p.done || p.sent != p.want
}

// count adds a probe's outcome to the run of equal ones and, once the run
// reaches its threshold, makes it the worker's result.
func (p *probeRun) count(outcome bus.ProbeOutcome, msg string) {
	if outcome == p.runOutcome {
		p.run++
	} else {
		p.runOutcome, p.run = outcome, 1
	}
	if (outcome == bus.ProbeFailure && p.run < p.failureThreshold) || (outcome == bus.ProbeSuccess && p.run < p.successThreshold) {
		return
	}
	p.want = result{id: p.id, outcome: outcome, message: msg}
	if outcome == bus.ProbeFailure && p.k.probe != bus.ProbeReadiness {
		p.hold = true
	}
	if outcome == bus.ProbeSuccess && p.k.probe == bus.ProbeStartup {
		p.r.markStarted(p.uid, p.k.container, p.id)
	}
}

// publish sends the worker's result when it differs from the last sent.
func (p *probeRun) publish(ctx context.Context, v view) {
	want := p.want
	if want.id == "" || (want.id == p.sent.id && want.outcome == p.sent.outcome) {
		return
	}
	if err := p.r.publish(ctx, v, p.k, want.outcome, want.message); err == nil {
		p.sent = want
		p.r.log.Info("probe result changed", append(logging.Pod(v.pod.Namespace, v.pod.Name, string(p.uid)),
			zap.String("container", p.k.container), zap.String("probe", string(p.k.probe)),
			zap.String("result", string(want.outcome)), zap.String("message", want.message))...)
	}
}

// check runs the probe once.
func (r *Runner) check(ctx context.Context, v view, probe *corev1.Probe, timeout time.Duration) (bus.ProbeOutcome, string) {
	var host string
	var port intstr.IntOrString
	switch {
	case probe.TCPSocket != nil:
		host, port = probe.TCPSocket.Host, probe.TCPSocket.Port
	case probe.HTTPGet != nil && r.httpGet == "get":
		return r.get(ctx, v, probe.HTTPGet, timeout)
	case probe.HTTPGet != nil:
		// Documented simplification: an httpGet probe is a TCP connect.
		host, port = probe.HTTPGet.Host, probe.HTTPGet.Port
	case probe.Exec != nil:
		return bus.ProbeUnknown, "tcpprober does not run exec probes (it runs tcpSocket, and httpGet as a TCP connect)"
	case probe.GRPC != nil:
		return bus.ProbeUnknown, "tcpprober does not run grpc probes (it runs tcpSocket, and httpGet as a TCP connect)"
	default:
		return bus.ProbeFailure, "the probe has no handler"
	}
	if host == "" {
		host = v.podIP
	}
	if host == "" {
		return bus.ProbeFailure, "the pod has no IP yet"
	}
	n, err := resolvePort(port, v.container)
	if err != nil {
		return bus.ProbeFailure, err.Error()
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(n)))
	if err != nil {
		return bus.ProbeFailure, err.Error()
	}
	_ = conn.Close()
	return bus.ProbeSuccess, ""
}

// probeClient sends the GETs: no connection kept between probes, and the
// server's certificate not verified (kubelet: HTTPS probes skip it).
var probeClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet's probe rule
	DisableKeepAlives: true,
}}

// get checks an httpGet probe with a GET (tcpprober.http-get=get): a
// status from 200 to 399 is Success (kubelet: the HTTP prober's rule).
func (r *Runner) get(ctx context.Context, v view, h *corev1.HTTPGetAction, timeout time.Duration) (bus.ProbeOutcome, string) {
	host := h.Host
	if host == "" {
		host = v.podIP
	}
	if host == "" {
		return bus.ProbeFailure, "the pod has no IP yet"
	}
	n, err := resolvePort(h.Port, v.container)
	if err != nil {
		return bus.ProbeFailure, err.Error()
	}
	scheme := "http"
	if h.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(n)), Path: h.Path}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return bus.ProbeFailure, err.Error()
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return bus.ProbeFailure, err.Error()
	}
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return bus.ProbeFailure, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	return bus.ProbeSuccess, ""
}

// resolvePort turns a probe's port (a number or a container port's name)
// into a number (kubelet: a name not found among the ports may be a number).
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	n := p.IntValue()
	if p.Type == intstr.String {
		n = 0
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				n = int(cp.ContainerPort)
			}
		}
		if n == 0 {
			if v, err := strconv.Atoi(p.StrVal); err == nil {
				n = v
			}
		}
	}
	if n <= 0 || n > 65535 {
		return 0, fmt.Errorf("invalid port %q for container %s", p.String(), c.Name)
	}
	return n, nil
}
