// Package probe runs one probe action (httpGet, tcpSocket, grpc, exec)
// against its target and says what came of it, as the kubelet's probe
// handlers do. It knows nothing of workers, thresholds or the bus.
package probe

import (
	"net"

	"github.com/splitlet/splitlet/libs/kube"
)

// Result is what one run of a probe action found.
type Result int

// The results of one probe run.
const (
	// Success: the target answered as healthy.
	Success Result = iota
	// Warning: healthy, with something the user should know (an HTTP
	// redirect to another host that was not followed).
	Warning
	// Failure: the target answered as unhealthy, or did not answer in time.
	Failure
	// Unknown: the probe could not be run at all.
	Unknown
)

func (r Result) String() string {
	switch r {
	case Success:
		return "success"
	case Warning:
		return "warning"
	case Failure:
		return "failure"
	default:
		return "unknown"
	}
}

// KubeVersion is the Kubernetes minor release whose kubelet Splitlet
// stands in for; it goes into the probes' User-Agent.
const KubeVersion = kube.Release

// UserAgent is the User-Agent of HTTP and gRPC probes (kubelet: kube-probe/<major>.<minor>).
const UserAgent = "kube-probe/" + KubeVersion

// maxOutput bounds how much of a target's answer is kept (kubelet: 10 KiB).
const maxOutput = 10 << 10

// dialer is the probes' dialer. A probe's connection lives for one probe,
// so TCP keep-alive (four setsockopt calls a connection) is off.
//
// Deviation from the kubelet (1.27+), which sets SO_LINGER 1 s on probe
// sockets: a lingering close blocks its OS thread until the FIN is
// acknowledged, and at thousands of probes a second that stalls the Go
// scheduler. Measured with BenchmarkProbeRate on 2 cores: 1000 pods × 2
// tcpSocket probes at period 1 s reached 120 of 2000 probes/s with the
// linger and 2000 without; 5000 pods × 2 reached 9987 of 10000 without it.
// The close stays graceful (FIN), as before the kubelet added the linger.
func dialer() *net.Dialer { return &net.Dialer{KeepAlive: -1} }

var sharedDialer = dialer()
