// Package discovery puts each running stage on the NATS service API (nats.go
// micro): every instance answers `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS`
// as the service `splitlet-<stage>`, with the node, stage and instance in
// its metadata, and serves its StageStatus (readiness, partitions owned,
// consumer lag) on the stage's status subject and in the endpoint data of
// `$SRV.STATS`. So `nats micro ls` and `nats micro stats` show a running
// stack, and `splitlet status` prints it as a table.
package discovery

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/splitlet/splitlet/libs/bus"
)

// ServicePrefix starts the service name of every stage.
const ServicePrefix = "splitlet-"

// ServiceName is the NATS service name of a stage.
func ServiceName(stage string) string { return ServicePrefix + stage }

// Stage is what a stage tells of itself.
type Stage struct {
	// Name is the stage's role on the bus (podworkers, prober, ...): the
	// service name.
	Name string
	// Implementation names the program in the role when it is not
	// Splitlet's own stage (tcpprober in the prober's role, say).
	Implementation string
	// Instance names this instance (a pod worker's replica id, say); empty
	// leaves the service API's own instance id to tell instances apart.
	Instance string
	// Partitions, when set, lists the partitions the instance owns now.
	Partitions func() []int
	// Ready, when set, reports whether the instance is ready (its process's
	// readiness checks).
	Ready func(ctx context.Context) bool
	// Consumers are the instance's consumers, whose lag it reports.
	Consumers *bus.Consumers
}

// StageStatus is what an instance answers on its status subject and in
// its `$SRV.STATS` endpoint data (JSON).
type StageStatus struct {
	Node  string `json:"node"`
	Stage string `json:"stage"`
	// Implementation is set when a replacement holds the stage's role.
	Implementation string `json:"implementation,omitempty"`
	Instance       string `json:"instance"`
	Version        string `json:"version"`
	Ready          bool   `json:"ready"`
	// Partitions the instance owns ([] when none); null for a stage that
	// takes every partition (so no omitempty: the two must stay apart).
	Partitions []int `json:"partitions"`
	// Lag sums the consumers' pending and unacknowledged messages.
	Lag       uint64            `json:"lag"`
	Consumers []bus.ConsumerLag `json:"consumers,omitempty"`
	Started   time.Time         `json:"started"`
	// At is when the instance answered.
	At time.Time `json:"at"`
}

// Options of Serve.
type Options struct {
	Node    string
	Version string
	Stage   Stage
	// Timeout of the consumer reads behind one answer (default 2 s).
	Timeout time.Duration
}

// Serve adds the instance to the service API on nc; stop it with the
// returned service's Stop.
func Serve(nc *nats.Conn, o Options) (micro.Service, error) {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	started := time.Now().UTC()
	status := func() StageStatus {
		ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
		defer cancel()
		st := StageStatus{Node: o.Node, Stage: o.Stage.Name, Implementation: o.Stage.Implementation,
			Instance: o.Stage.Instance, Version: o.Version, Ready: true, Started: started}
		if o.Stage.Ready != nil {
			st.Ready = o.Stage.Ready(ctx)
		}
		if o.Stage.Partitions != nil {
			st.Partitions = o.Stage.Partitions()
			if st.Partitions == nil {
				st.Partitions = []int{}
			}
		}
		st.Consumers = o.Stage.Consumers.Lags(ctx)
		for _, c := range st.Consumers {
			st.Lag += c.Pending + uint64(max(c.AckPending, 0))
		}
		st.At = time.Now().UTC()
		return st
	}
	meta := map[string]string{"node": o.Node, "stage": o.Stage.Name}
	if o.Stage.Instance != "" {
		meta["instance"] = o.Stage.Instance
	}
	if o.Stage.Implementation != "" {
		meta["implementation"] = o.Stage.Implementation
	}
	return micro.AddService(nc, micro.Config{
		Name:        ServiceName(o.Stage.Name),
		Version:     SemVer(o.Version),
		Description: fmt.Sprintf("Splitlet %s of node %s", o.Stage.Name, o.Node),
		Metadata:    meta,
		Endpoint: &micro.EndpointConfig{
			Subject: bus.For(o.Node).Status(o.Stage.Name),
			Handler: micro.HandlerFunc(func(req micro.Request) {
				_ = req.RespondJSON(status())
			}),
			Metadata: map[string]string{"returns": "StageStatus"},
			// every instance answers, not one of a queue group.
			QueueGroupDisabled: true,
		},
		StatsHandler: func(*micro.Endpoint) any { return status() },
	})
}

// semVer is semver.org's grammar of a version (its suggested expression).
var semVer = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// SemVer turns a build's version (v0.1.0-dev, a git describe such as
// v0.2.0-3-gabc1234-dirty, or a bare commit) into the SemVer the service
// API requires: the leading v dropped, and anything else kept as a
// pre-release of 0.0.0 (0.0.0-build-<version>).
func SemVer(v string) string {
	s := strings.TrimPrefix(v, "v")
	if semVer.MatchString(s) {
		return s
	}
	clean := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' {
			return r
		}
		return '-'
	}, v)
	clean = strings.Trim(clean, "-")
	if clean == "" {
		return "0.0.0"
	}
	return "0.0.0-build-" + clean
}
