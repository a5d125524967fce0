package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/bus/bustest"
	"github.com/splitlet/splitlet/libs/testenv"
)

// Every stage runs as its own bus identity (splitlet bus identities), with
// the permissions docs/bus.md's table gives it, on streams made by the
// admin identity (splitlet bus init): a pod with an exec readiness probe
// runs, is Ready, shows its logs and is deleted, and the server sees no
// permission violation. Each identity is refused what the table does not
// give it.
func TestStageIdentities(t *testing.T) {
	testenv.SkipShort(t, "etcd and kube-apiserver")
	const node = "ids-node"
	bin := buildBinary(t)
	dir := t.TempDir()
	ids := filepath.Join(dir, "ids")
	if out, err := exec.Command(bin, "bus", "identities", "--node-name", node, "--dir", ids).CombinedOutput(); err != nil {
		t.Fatalf("bus identities: %v\n%s", err, out)
	}
	for _, id := range append([]string{"admin"}, bus.Stages...) {
		fi, err := os.Stat(filepath.Join(ids, id+".nk"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("seed of %s: %v %v", id, fi, err)
		}
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(ids, "nats.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\ninclude ./auth.conf\n", port, filepath.Join(dir, "js"))), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server config with the identities' auth.conf: %v", err)
	}
	opts.NoSigs = true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	seen := &bustest.Violations{}
	ns.SetLoggerV2(seen, false, false, false)
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	url := ns.ClientURL()

	if out, err := exec.Command(bin, "bus", "init", "--node-name", node, "--nats-url", url, "--nats-nkey", filepath.Join(ids, "admin.nk")).CombinedOutput(); err != nil {
		t.Fatalf("bus init: %v\n%s", err, out)
	}

	cp := testenv.ControlPlaneForTest(t)
	for _, stage := range bus.Stages {
		startSplitlet(t, bin, cp, node, stage, "--services="+stage, "--nats-url="+url, "--nats-nkey="+filepath.Join(ids, stage+".nk"),
			"--runtime=sim", "--nodehb.agent-not-ready-grace=1s")
	}
	cs := cp.Clientset()
	ctx := t.Context()
	waitNodeReady(t, cs, node)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ids", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: "app", Image: "busybox", Command: []string{"sleep", "3600"},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1}}}},
	}
	pod, err = cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "pod Ready through an exec probe", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return podCondition(p, corev1.PodReady) == corev1.ConditionTrue, string(p.Status.Phase)
	})
	if _, err := logsOf(ctx, cs, pod.Name, &corev1.PodLogOptions{}); err != nil {
		t.Errorf("logs through nodehb and the pod workers: %v", err)
	}
	checkStatus(t, bin, node, url, filepath.Join(ids, "admin.nk"))
	checkProbeExec(t, url, filepath.Join(ids, bus.StageProber+".nk"), node, pod)
	// The sim runtime records no container Events by default
	// (podworkers.container-events auto), as kwok records none.
	if list, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name}); err != nil {
		t.Error(err)
	} else {
		for _, e := range list.Items {
			if e.Reason == "Created" || e.Reason == "Started" {
				t.Errorf("a container Event on the sim runtime: %s %q", e.Reason, e.Message)
			}
		}
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "pod gone", func() (bool, string) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if v := seen.All(); len(v) > 0 {
		t.Errorf("permission violations while the stages ran:\n%s", strings.Join(v, "\n"))
	}

	// What the table does not give, each identity is refused.
	s := bus.For(node)
	for _, c := range []struct{ id, subject string }{
		{bus.StagePodworkers, s.PodUpdates(0)},    // only podconfig says what runs
		{bus.StagePodworkers, s.PodReconciles(0)}, // and what the API's status is
		{bus.StageProber, s.PodReconciles(0)},
		{bus.StageProber, s.PodStatus(0)},        // only the pod workers report runtime status
		{bus.StageStatussync, s.Exec(0)},         // only nodehb runs any command
		{bus.StageProber, s.Exec(0)},             // the prober runs probe commands only
		{bus.StageStatussync, s.ProbeExec(0)},    // and only the prober asks for them
		{bus.StageStatussync, s.ProbeResults(0)}, // only the prober reports probes
		{bus.StageNodehb, s.AgentReady()},        // only the pod workers say they are ready
		{bus.StageProber, s.Evict(0)},            // only the eviction manager (nodehb) evicts
		{bus.StageStatussync, s.Evict(0)},
		{bus.StageProber, s.Reclaim(0)}, // and asks the node's garbage collector to reclaim
		{bus.StagePodconfig, s.Reclaim(0)},
		{bus.StagePodworkers, s.NodePressure()}, // and says the node is under pressure
		{bus.StagePodconfig, "$JS.API.STREAM.DELETE." + bus.StreamName(node, bus.StreamPodUpdates)}, // no stage manages streams
		// no stage touches another's durable consumers, even on a stream
		// it reads with consumers of its own.
		{bus.StageStatussync, "$JS.API.CONSUMER.DELETE." + bus.StreamName(node, bus.StreamPodUpdates) + "." + bus.DurableProberPodUpdates},
		{bus.StagePodworkers, "$JS.API.CONSUMER.DELETE." + bus.StreamName(node, bus.StreamPodStatus) + "." + bus.DurableStatussyncPodStatus},
		{bus.StagePodworkers, "$JS.API.CONSUMER.CREATE." + bus.StreamName(node, bus.StreamPodUpdates) + "." + bus.DurableProberPodUpdates},
		{bus.StageProber, "$JS.API.CONSUMER.MSG.NEXT." + bus.StreamName(node, bus.StreamPodStatus) + "." + bus.DurableStatussyncPodStatus},
		{bus.StagePodworkers, "$JS.API.CONSUMER.INFO." + bus.StreamName(node, bus.StreamProbes) + "." + bus.DurableStatussyncProbes},
		{bus.StagePodworkers, "$JS.ACK." + bus.StreamName(node, bus.StreamPodStatus) + "." + bus.DurableProberPodStatus + ".1.1.1.1.0"},
	} {
		if err := refused(t, url, filepath.Join(ids, c.id+".nk"), c.subject); err != nil {
			t.Errorf("%s publishing to %s: %v", c.id, c.subject, err)
		}
	}
	// No stage reads another's replies: each may subscribe to its own
	// inboxes alone.
	for _, c := range []struct{ id, subject string }{
		{bus.StageProber, bus.InboxPrefix(bus.StageNodehb) + ".>"}, // exec output, logs, stream URLs
		{bus.StageStatussync, bus.InboxPrefix(bus.StagePodworkers) + ".>"},
		{bus.StageNodehb, "_INBOX.>"},
	} {
		if err := refusedSubscribe(t, url, filepath.Join(ids, c.id+".nk"), c.id, c.subject); err != nil {
			t.Errorf("%s subscribing to %s: %v", c.id, c.subject, err)
		}
	}
	// (and the server's log shows them: the check above of a quiet log
	// could have failed.)
	testenv.Eventually(t, 10*time.Second, "the refusals in the server's log", func() (bool, string) {
		return len(seen.All()) >= 19, strings.Join(seen.All(), "\n")
	})
}

// connectAs connects with the seed, with the inboxes of identity id (as its
// stage does; none given: nats.go's); errs gets the connection's
// asynchronous errors.
func connectAs(t *testing.T, url, seed, id string, errs chan<- error) *nats.Conn {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	opts := []nats.Option{opt}
	if id != "" {
		opts = append(opts, nats.CustomInboxPrefix(bus.InboxPrefix(id)))
	}
	if errs != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// refusedSubscribe subscribes to subject as the identity and says nothing
// when the server answers with a permissions violation.
func refusedSubscribe(t *testing.T, url, seed, id, subject string) error {
	t.Helper()
	errs := make(chan error, 4)
	nc := connectAs(t, url, seed, id, errs)
	defer nc.Close()
	if _, err := nc.SubscribeSync(subject); err != nil {
		return err
	}
	_ = nc.Flush()
	return violation(errs)
}

// violation waits for the connection's error and says nothing when it is a
// permissions violation.
func violation(errs <-chan error) error {
	select {
	case err := <-errs:
		if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			return nil
		}
		return fmt.Errorf("error %v, not a permissions violation", err)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("allowed")
	}
}

// refused connects as the identity, publishes to subject and says nothing
// when the server answers with a permissions violation.
func refused(t *testing.T, url, seed, subject string) error {
	t.Helper()
	errs := make(chan error, 4)
	nc := connectAs(t, url, seed, "", errs)
	defer nc.Close()
	if err := nc.Publish(subject, []byte("{}")); err != nil {
		return err
	}
	_ = nc.Flush()
	return violation(errs)
}

// checkStatus runs `splitlet status` with the admin identity against a
// running node: every stage answers the service API, ready, the pod
// workers with every partition, and the table names them all.
func checkStatus(t *testing.T, bin, node, url, adminSeed string) {
	t.Helper()
	var st nodeStatus
	testenv.Eventually(t, 30*time.Second, "splitlet status: every stage ready, all partitions owned", func() (bool, string) {
		out, err := exec.Command(bin, "status", "--node-name", node, "--nats-url", url, "--nats-nkey", adminSeed, "--json").Output()
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		st = nodeStatus{}
		if err := json.Unmarshal(out, &st); err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		owned := map[int]bool{}
		for _, r := range st.Stages {
			if !r.Ready || r.Version == "" || r.Started.IsZero() {
				return false, fmt.Sprintf("%+v", r)
			}
			for _, p := range r.Partitions {
				owned[p] = true
			}
		}
		if len(st.Missing) > 0 || len(st.Stages) != len(bus.Stages) || len(owned) != bus.DefaultPartitions || st.Agent == nil || !st.Agent.Ready {
			return false, string(out)
		}
		return true, ""
	})
	for _, r := range st.Stages {
		if (r.Stage == bus.StagePodworkers) != (r.Partitions != nil) {
			t.Errorf("%s reports partitions %v: only the pod workers own some", r.Stage, r.Partitions)
		}
		if r.Stage == bus.StageStatussync && len(r.Consumers) == 0 {
			t.Errorf("statussync reports no consumer lag: %+v", r)
		}
	}
	out, err := exec.Command(bin, "status", "--node-name", node, "--nats-url", url, "--nats-nkey", adminSeed).CombinedOutput()
	if err != nil {
		t.Fatalf("splitlet status: %v\n%s", err, out)
	}
	t.Logf("splitlet status:\n%s", out)
	for _, want := range append([]string{"STAGE", "0-15", "pod workers: ready"}, bus.Stages...) {
		if !strings.Contains(string(out), want) {
			t.Errorf("splitlet status table lacks %q:\n%s", want, out)
		}
	}
	// another node's status: nothing answers for it, exit 1.
	if out, err := exec.Command(bin, "status", "--node-name", "no-such-node", "--nats-url", url, "--nats-nkey", adminSeed, "--wait", "300ms").CombinedOutput(); err == nil {
		t.Errorf("splitlet status of a node with no stages exited 0:\n%s", out)
	}
}

// checkProbeExec asks, as the prober's identity, the pod worker that owns
// the pod for the pod's readiness probe command (run) and for another
// command (refused by the pod worker: the prober runs probes, nothing
// else).
func checkProbeExec(t *testing.T, url, seed, node string, pod *corev1.Pod) {
	t.Helper()
	nc := connectAs(t, url, seed, bus.StageProber, nil)
	pub := bus.NewPublisher(nc, nil, node, "prober-test")
	subject := bus.For(node).ProbeExec(bus.Partition(string(pod.UID), bus.DefaultPartitions))
	ref := bus.ContainerRef{PodUID: pod.UID, Namespace: pod.Namespace, Pod: pod.Name, Container: "app"}
	for _, c := range []struct {
		cmd  []string
		want string
	}{{[]string{"true"}, ""}, {[]string{"sh", "-c", "id"}, "probe exec refused"}} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		env, err := pub.Request(ctx, subject, bus.KindExecRequest, &bus.ExecRequest{ContainerRef: ref, Command: c.cmd, TimeoutSeconds: 5})
		cancel()
		if err != nil {
			t.Fatalf("probe exec %q as the prober: %v", c.cmd, err)
		}
		res, err := bus.DecodeExecResult(env)
		if err != nil {
			t.Fatal(err)
		}
		if c.want == "" && (res.Error != "" || res.ExitCode != 0) || c.want != "" && !strings.Contains(res.Error, c.want) {
			t.Errorf("probe exec %q as the prober: %+v, want error %q", c.cmd, res, c.want)
		}
	}
}
