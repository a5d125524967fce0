package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/bus"
)

// ProberShadow checks a prober running as a shadow (its --shadow key;
// docs/bus.md, "Shadow stages"), with no live prober on the node: the kit
// is the only other party, so anything on the live subjects is the
// shadow's doing.
//
// Cases:
//   - shadow/results-under-the-shadow-prefix: readiness follows the port
//     (Success, Failure when it closes), each result on
//     shadow.prober.probes.<p> of the pod's partition.
//   - shadow/nothing-live: over the same time, no ProbeResult on the live
//     probes.* subjects, and no Event in the API server about the pod (when
//     Config is set): a shadow changes nothing the node does.
//   - shadow/own-consumers: the shadow reads through its own durables
//     (shadow-prober, shadow-prober-status), and the live prober's are
//     neither made nor consumed.
func ProberShadow(t *testing.T, tg Target, opts ...Option) {
	h := newHarness(t, tg, opts)
	shadow := h.subjects.Shadow(bus.StageProber)
	results := h.watch(t, shadow.ProbeResultsAll(), SourceProber)
	live := h.watch(t, h.subjects.ProbeResultsAll(), SourceProber)
	var pod *corev1.Pod
	h.run(t, "shadow/results-under-the-shadow-prefix", false, func(t *testing.T) {
		l := newListener(t, h.tg.ProbeHost)
		pod = h.newPod("shadow-ready", corev1.Container{Name: "app", Image: "busybox", ReadinessProbe: tcpProbe(l.port, 1)})
		st := h.startPod(t, pod)
		id := st.ContainerStatuses[0].ContainerID
		i, r := results.waitFor(t, 0, "readiness Success under the shadow prefix", result(pod, id, bus.ProbeReadiness, bus.ProbeSuccess))
		l.close(t)
		_, r2 := results.waitFor(t, i+1, "readiness Failure under the shadow prefix after the port closed", result(pod, id, bus.ProbeReadiness, bus.ProbeFailure))
		for _, m := range []received{r, r2} {
			if want := shadow.ProbeResults(h.partition(string(pod.UID))); m.subject != want {
				t.Errorf("shadow ProbeResult on %s, want %s", m.subject, want)
			}
		}
	})
	h.run(t, "shadow/nothing-live", false, func(t *testing.T) {
		if pod == nil {
			t.Skip("no shadow result to compare with")
		}
		live.never(t, 0, quiet, "a live ProbeResult while only a shadow prober runs", func(received) bool { return true })
		if h.tg.Config != nil {
			h.noEvents(t, pod)
		}
	})
	h.run(t, "shadow/own-consumers", false, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), h.tg.Timeout)
		defer cancel()
		for _, c := range []struct{ stream, durable string }{
			{bus.StreamPodUpdates, DurableProberPodUpdates}, {bus.StreamPodStatus, DurableProberPodStatus},
		} {
			name := bus.StreamName(h.tg.Node, c.stream)
			if _, err := h.js.Consumer(ctx, name, c.durable); !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Errorf("the live durable %s on %s: %v; want none (the shadow must not make or read it)", c.durable, c.stream, err)
			}
			if _, err := h.js.Consumer(ctx, name, bus.ShadowDurable(c.durable)); err != nil {
				t.Errorf("the shadow's durable %s on %s: %v", bus.ShadowDurable(c.durable), c.stream, err)
			}
		}
	})
}

// noEvents checks that the API server holds no Event about the pod.
func (h *harness) noEvents(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(h.tg.Config)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().Events(pod.Namespace).List(t.Context(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(pod.UID)).String()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		t.Errorf("Event %s %q about the pod: a shadow writes nothing to the API server", e.Reason, e.Message)
	}
}

// StatusSyncShadow checks a statussync running as a shadow (--shadow),
// with no live statussync on the node (Target.Config is required).
//
// Cases:
//   - shadow/patch-under-the-shadow-prefix: a pod's running status comes
//     out as a StatusPatch on shadow.statussync.statuspatches.<p> (phase
//     Running in the patch), and the pod in the API server is left as it
//     was (same resourceVersion, phase Pending): the shadow computed the
//     patch and did not send it.
//   - shadow/own-consumers: its durables are shadow-statussync,
//     shadow-statussync-status and shadow-statussync-probes; the live
//     statussync's are neither made nor consumed.
func StatusSyncShadow(t *testing.T, tg Target, opts ...Option) {
	h := newHarness(t, tg, opts)
	if h.tg.Config == nil {
		t.Fatal("conformance: StatusSyncShadow needs Target.Config (the stage's API server)")
	}
	cs, err := kubernetes.NewForConfig(h.tg.Config)
	if err != nil {
		t.Fatal(err)
	}
	h.publish(t, h.config, h.subjects.SourcesReady(), bus.KindSourcesReady, "",
		&bus.SourcesReady{Sources: []string{SourceAPI}, Ready: []string{SourceAPI}, AllReady: true})
	shadow := h.subjects.Shadow(bus.StageStatussync)
	patches := h.watch(t, shadow.All())
	h.run(t, "shadow/patch-under-the-shadow-prefix", false, func(t *testing.T) {
		pod := h.apiPod(t, cs, "shadow-status", corev1.Container{Name: "app", Image: "busybox"})
		h.sendStatus(t, h.runningStatus(pod, map[string]string{"app": "sim://shadow-1"}, time.Now()))
		_, r := patches.waitFor(t, 0, "a StatusPatch with phase Running", func(r received) bool {
			p, err := bus.DecodeStatusPatch(r.env)
			return err == nil && p.PodUID == pod.UID && strings.Contains(string(p.Patch), `"phase":"Running"`)
		})
		if want := shadow.StatusPatches(h.partition(string(pod.UID))); r.subject != want {
			t.Errorf("StatusPatch on %s, want %s", r.subject, want)
		}
		got, err := cs.CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != pod.ResourceVersion || got.Status.Phase == corev1.PodRunning {
			t.Errorf("the API pod changed (resourceVersion %s, was %s; phase %s): a shadow writes nothing", got.ResourceVersion, pod.ResourceVersion, got.Status.Phase)
		}
		h.noEvents(t, pod)
	})
	h.run(t, "shadow/own-consumers", false, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), h.tg.Timeout)
		defer cancel()
		for _, c := range []struct{ stream, durable string }{
			{bus.StreamPodUpdates, bus.DurableStatussyncPodUpdates}, {bus.StreamPodStatus, bus.DurableStatussyncPodStatus},
			{bus.StreamProbes, bus.DurableStatussyncProbes},
		} {
			name := bus.StreamName(h.tg.Node, c.stream)
			if _, err := h.js.Consumer(ctx, name, c.durable); !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Errorf("the live durable %s on %s: %v; want none", c.durable, c.stream, err)
			}
			if _, err := h.js.Consumer(ctx, name, bus.ShadowDurable(c.durable)); err != nil {
				t.Errorf("the shadow's durable %s on %s: %v", bus.ShadowDurable(c.durable), c.stream, err)
			}
		}
	})
}

// PodWorkersShadow checks a pod worker running as a shadow (--shadow),
// with no live pod worker on the node: the kit plays the live pod workers
// (their statuses on podstatus.*, which a shadow takes for the live
// runtime's state) and podconfig.
//
// Cases:
//   - shadow/status-under-the-shadow-prefix: a pod the kit adds, whose
//     container the kit's live pod worker reports running, comes out under
//     shadow.podworkers.podstatus.<p> of its partition with that very
//     container running: the shadow decided the start and took the live
//     runtime's container, it started none of its own.
//   - shadow/nothing-live: over the same time, no pod status on the live
//     podstatus.* subjects but the kit's, no AgentReadiness, and no Event
//     in the API server about the pod (when Config is set).
//   - shadow/own-consumers: no durable consumer on the probes stream but a
//     shadow's own (shadow-…): the shadow takes no live stage's, and the
//     live pod workers keep none there (they follow the probe results).
func PodWorkersShadow(t *testing.T, tg Target, opts ...Option) {
	h := newHarness(t, tg, opts)
	h.publish(t, h.config, h.subjects.SourcesReady(), bus.KindSourcesReady, "",
		&bus.SourcesReady{Sources: []string{SourceAPI}, Ready: []string{SourceAPI}, AllReady: true})
	shadow := h.subjects.Shadow(bus.StagePodworkers)
	statuses := h.watch(t, shadow.PodStatusAll())
	live := h.watch(t, h.subjects.PodStatusAll(), SourcePodWorkers)
	agent := h.watch(t, h.subjects.AgentReady())
	var pod *corev1.Pod
	h.run(t, "shadow/status-under-the-shadow-prefix", false, func(t *testing.T) {
		pod = h.newPod("shadow-pw", corev1.Container{Name: "app", Image: "busybox"})
		h.sendPods(t, bus.OpAdd, pod)
		id := "kit://" + string(pod.UID)[:8]
		h.sendStatus(t, h.runningStatus(pod, map[string]string{"app": id}, time.Now()))
		_, r := statuses.waitFor(t, 0, "the pod's shadow status with the live container running", func(r received) bool {
			st, err := bus.DecodePodRuntimeStatus(r.env)
			return err == nil && st.UID == pod.UID && len(st.ContainerStatuses) == 1 &&
				st.ContainerStatuses[0].ContainerID == id && st.ContainerStatuses[0].State.Running != nil
		})
		if want := shadow.PodStatus(h.partition(string(pod.UID))); r.subject != want {
			t.Errorf("shadow pod status on %s, want %s", r.subject, want)
		}
	})
	h.run(t, "shadow/nothing-live", false, func(t *testing.T) {
		if pod == nil {
			t.Skip("no shadow status to compare with")
		}
		live.never(t, 0, quiet, "a live pod status while only a shadow pod worker runs", func(received) bool { return true })
		agent.never(t, 0, 0, "an AgentReadiness from a shadow pod worker", func(received) bool { return true })
		if h.tg.Config != nil {
			h.noEvents(t, pod)
		}
	})
	h.run(t, "shadow/own-consumers", false, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), h.tg.Timeout)
		defer cancel()
		name := bus.StreamName(h.tg.Node, bus.StreamProbes)
		stream, err := h.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		list := stream.ListConsumers(ctx)
		for c := range list.Info() {
			if d := c.Config.Durable; d != "" && !strings.HasPrefix(d, bus.ShadowDurable("")) {
				t.Errorf("durable %s on %s: a shadow pod worker takes no live durable, and the live ones keep none there", d, name)
			}
		}
		if err := list.Err(); err != nil {
			t.Fatal(err)
		}
	})
}
