// Package poll waits for what the benchmarks watch: a condition, with a
// deadline, and a node's or a pod's readiness.
package poll

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Until runs check every interval until it is done, fails (its error is
// returned), ctx ends or timeout passes: that error names what is awaited
// and the state check gave last.
func Until(ctx context.Context, timeout, every time.Duration, what string, check func() (done bool, state string, err error)) error {
	var state string
	err := wait.PollUntilContextTimeout(ctx, every, timeout, true, func(context.Context) (bool, error) {
		done, s, err := check()
		state = s
		return done, err
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case !wait.Interrupted(err):
		return err
	case state == "":
		return fmt.Errorf("%s: not within %v", what, timeout)
	}
	return fmt.Errorf("%s: not within %v (%s)", what, timeout, state)
}

// NodeReady reads the node and says whether its Ready condition is True
// (false when it cannot be read).
func NodeReady(ctx context.Context, cs kubernetes.Interface, node string) bool {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	return err == nil && IsNodeReady(n)
}

// IsNodeReady says whether the node's Ready condition is True.
func IsNodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// IsPodReady says whether the pod runs with its Ready condition True.
func IsPodReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
