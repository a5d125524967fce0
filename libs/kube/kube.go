// Package kube builds the Kubernetes client of a Splitlet process.
package kube

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig resolves the kubeconfig as kubectl does: the explicit path, then
// KUBECONFIG, then ~/.kube/config, and in a pod the in-cluster config.
//
// contentType is how requests are encoded and the answer preferred
// (kubelet: --kube-api-content-type, protobuf by default, cheaper than JSON
// on both sides); JSON stays acceptable for anything protobuf does not cover.
func RESTConfig(kubeconfig string, qps float32, burst int, userAgent, contentType string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS = qps
	cfg.Burst = burst
	cfg.UserAgent = userAgent
	if contentType != "" {
		cfg.ContentType = contentType
		if contentType != runtime.ContentTypeJSON {
			cfg.AcceptContentTypes = contentType + "," + runtime.ContentTypeJSON
		}
	}
	return cfg, nil
}

// Clientset builds a typed clientset.
func Clientset(cfg *rest.Config) (kubernetes.Interface, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, nil
}

// HeartbeatConfig is base for a client of the node's heartbeat alone (Lease
// and Node status), as the kubelet's heartbeat client: no client-side
// throttling, so that a renewal never queues behind the process's other
// calls (its loops bound its rate), and every request cut off after
// timeout. base is not changed.
func HeartbeatConfig(base *rest.Config, timeout time.Duration) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.RateLimiter = nil
	cfg.QPS = -1
	cfg.Timeout = timeout
	return cfg
}

// OwnLimiterConfig is base for a client with a rate limiter of its own at
// base's QPS and burst, so that its calls queue only behind each other.
// base is not changed.
func OwnLimiterConfig(base *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.RateLimiter = nil
	return cfg
}
