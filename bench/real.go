package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/splitlet/splitlet/bench/internal/poll"
	"github.com/splitlet/splitlet/libs/testenv"
)

// realOptions are the flags of the real-container case.
type realOptions struct {
	pods     []int
	agents   []string
	variants []string
	// idlePods run for idleDuration (0: no idle case).
	idlePods     int
	idleDuration time.Duration
	// settle: how long an agent runs after its node is Ready before the
	// first pod is created (the kubelet delays the first probes of a
	// worker by a random part of the probe period while it is younger
	// than one period).
	settle time.Duration
	// teardownWait bounds the wait for every sandbox to be removed.
	teardownWait time.Duration
	// rounds of each case over the agents, their order reversed every
	// other round; each figure is the median.
	rounds int
}

func (o realOptions) enabled() bool { return len(o.pods) > 0 || (o.idlePods > 0 && o.idleDuration > 0) }

// The variants of the real-container case's pods.
const (
	variantPlain = "plain" // busybox sleeping
	variantProbe = "probe" // and an exec readiness probe reading a configMap volume
)

// parsePodCounts reads a comma-separated list of pod counts; "" or "0"
// is none.
func parsePodCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("pod count %q: want a number ≥ 0", f)
		}
		if n > 0 {
			out = append(out, n)
		}
	}
	return out, nil
}

// parseNames reads a comma-separated list of names, each one of known.
func parseNames(s, what string, known []string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		ok := false
		for _, k := range known {
			ok = ok || k == f
		}
		if !ok {
			return nil, fmt.Errorf("unknown %s %q (want one of %s)", what, f, strings.Join(known, ", "))
		}
		out = append(out, f)
	}
	return out, nil
}

// realCaseResult is one agent's figures for one variant and pod count.
type realCaseResult struct {
	Agent   string `json:"agent"`
	Variant string `json:"variant"`
	Pods    int    `json:"pods"`
	// Round counts from 1 (0 in reports of one round before rounds).
	Round int `json:"round,omitempty"`
	// From the first create: until every pod is Running and Ready; and
	// each pod's create → Ready from the bench's watch.
	AllReadySec float64 `json:"allReadySeconds"`
	P50Ms       float64 `json:"p50Ms"`
	P99Ms       float64 `json:"p99Ms"`
	MaxMs       float64 `json:"maxMs"`
	// From the DeleteCollection: until every pod is gone from the API;
	// until every sandbox of the pods is stopped, and removed, in
	// containerd (-1: not within the wait).
	AllGoneSec          float64 `json:"allGoneSeconds"`
	SandboxesStoppedSec float64 `json:"sandboxesStoppedSeconds"`
	SandboxesRemovedSec float64 `json:"sandboxesRemovedSeconds"`
	// CPU seconds (user + system, reaped children included) from the
	// first create until every sandbox is removed (or the wait ended):
	// the agent's processes, summed, and each; containerd's and its
	// shims'. CPUToReadySec is the agent's until all pods are Ready,
	// CPUToStoppedSec until every sandbox is stopped (the kubelet removes
	// them only in its garbage collection, once a minute: its CPU to the
	// removal holds up to a minute of it idling).
	AgentCPUSec      float64            `json:"agentCPUSeconds"`
	AgentCPUEach     map[string]float64 `json:"agentCPUSecondsByProcess"`
	CPUToReadySec    float64            `json:"agentCPUSecondsToReady"`
	CPUToStoppedSec  float64            `json:"agentCPUSecondsToSandboxesStopped"`
	ContainerdCPUSec float64            `json:"containerdCPUSeconds"`
	ShimsCPUSec      float64            `json:"shimsCPUSeconds"`
	// Peak of the agent's summed PSS over the same window (sampled).
	PeakPSSBytes int64            `json:"peakPSSBytes"`
	PeakPSSEach  map[string]int64 `json:"peakPSSBytesByProcess"`
	// API writes per pod (apiserver_request_total, mutating verbs, less
	// the bench's creates): to pods, create → all Ready; to every
	// resource, create → all Ready, and create → all gone (less the
	// DeleteCollection).
	PodWritesPerPod      float64 `json:"podWritesPerPod"`
	AllWritesPerPod      float64 `json:"allWritesPerPod"`
	AllWritesPerPodCycle float64 `json:"allWritesPerPodToGone"`
	// Each process's PSS, anonymous and file pages, when all are Ready.
	PSSPartsAtReady map[string]map[string]int64 `json:"pssPartsAtReadyBytes"`
	// By verb and resource, per pod, create → all gone.
	WritesPerPodEach map[string]float64 `json:"writesPerPodToGoneByResource"`
}

// realIdleResult is one agent's idle figures: its pods running, nothing
// changing.
type realIdleResult struct {
	Agent   string  `json:"agent"`
	Pods    int     `json:"pods"`
	Minutes float64 `json:"minutes"`
	// CPU seconds per minute: the agent's (children included), and
	// containerd's with its shims'.
	AgentCPUPerMin   float64            `json:"agentCPUSecondsPerMinute"`
	AgentCPUEach     map[string]float64 `json:"agentCPUSecondsByProcess"`
	RuntimeCPUPerMin float64            `json:"runtimeCPUSecondsPerMinute"`
	PeakPSSBytes     int64              `json:"peakPSSBytes"`
	// Each process's PSS, anonymous and file pages, at the window's end.
	PSSParts map[string]map[string]int64 `json:"pssPartsBytes"`
	// API writes per minute, every resource, and by verb and resource.
	WritesPerMin     float64            `json:"apiWritesPerMinute"`
	WritesPerMinEach map[string]float64 `json:"apiWritesPerMinuteByResource"`
}

// realReport is the case's part of the JSON report.
type realReport struct {
	Cases []*realCaseResult `json:"cases"`
	Idle  []*realIdleResult `json:"idle,omitempty"`
	// Ratios: each agent's figures over the kubelet's, with the targets.
	Ratios []realRatio `json:"ratios,omitempty"`
}

// runReal runs the real-container case: one containerd for the run, and
// for each variant, pod count and agent, one after another, a fresh
// control plane. It is not pinned: containerd, the shims and the agents
// share the machine as on a node.
func runReal(ctx context.Context, out io.Writer, env *benchEnv, o realOptions) (*realReport, error) {
	if env.agentCPUs != "" {
		env.agentCPUs, env.controlPlaneCPUs = "", ""
		if err := pin(fmt.Sprintf("0-%d", runtime.NumCPU()-1), os.Getpid()); err != nil {
			return nil, err
		}
	}
	fmt.Fprintln(out, "real-container case: starting containerd and importing busybox and pause ...")
	cd, err := testenv.EnsureContainerd(ctx, testenv.ContainerdOptions{
		Address: filepath.Join(env.workDir, "no-containerd.sock"), Dir: filepath.Join(env.workDir, "containerd"),
		CNIConfig: realCNIConfig,
	})
	if err != nil {
		return nil, err
	}
	defer cd.Stop()
	rep := &realReport{}
	rounds := max(o.rounds, 1)
	for _, variant := range o.variants {
		for _, n := range o.pods {
			for round := range rounds {
				for _, name := range roundOrder(o.agents, round) {
					a, _ := findRealAgent(name)
					fmt.Fprintf(out, "real-container case: %s, %d pods, %s (round %d of %d) ...\n", name, n, variant, round+1, rounds)
					res, err := runRealCase(ctx, env, cd, a, o, variant, n)
					if err != nil {
						return rep, fmt.Errorf("real-container case, %s, %d pods, %s: %w", name, n, variant, err)
					}
					res.Round = round + 1
					printRealCase(out, res)
					rep.Cases = append(rep.Cases, res)
				}
			}
		}
	}
	if o.idlePods > 0 && o.idleDuration > 0 {
		for _, name := range o.agents {
			a, _ := findRealAgent(name)
			fmt.Fprintf(out, "real-container idle case: %s, %d pods for %v ...\n", name, o.idlePods, o.idleDuration)
			res, err := runRealIdle(ctx, env, cd, a, o)
			if err != nil {
				return rep, fmt.Errorf("real-container idle case, %s: %w", name, err)
			}
			printRealIdle(out, res)
			rep.Idle = append(rep.Idle, res)
		}
	}
	fmt.Fprintln(out)
	printRealTables(out, rep)
	rep.Ratios = realRatios(rep)
	return rep, nil
}

// check fails early, before any case runs, when the real-container case
// cannot: it needs root, containerd and, for the kubelet, bin/kubelet.
func (o realOptions) check() error {
	if !o.enabled() {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the real-container case needs root (containerd, the kubelet); -real=false skips it")
	}
	if _, err := exec.LookPath("containerd"); err != nil {
		return fmt.Errorf("the real-container case needs containerd (Debian's containerd, and containernetworking-plugins): %w; -real=false skips it", err)
	}
	if slices.Contains(o.agents, "kubelet") {
		if _, err := testenv.Binary(testenv.KubeletBinary); err != nil {
			return fmt.Errorf("%w (build it: TESTENV_EXTRA=kubelet hack/testenv/build.sh bin; -real=false skips the case)", err)
		}
	}
	return nil
}

// realCNIConfig is the pods' network on the run's containerd: a bridge of
// its own with no address on the host, as testenv.PodCNIConfig.
const realCNIConfig = `{
  "cniVersion": "0.4.0",
  "name": "splitlet-bench",
  "plugins": [{
    "type": "bridge",
    "bridge": "splbench0",
    "isGateway": false,
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.87.0.0/16"}]]}
  }]
}
`

// realSetup is one case's control plane and started agent.
type realSetup struct {
	e    *realEnv
	cs   kubernetes.Interface
	run  *agentRun
	node string
	// label marks the case's pods (bench-run); tr follows them.
	label     string
	tr        *tracker
	stopTrack func()
	stop      func()
}

// setUpReal starts a fresh control plane and the agent, waits for the node
// to be Ready and then o.settle, and follows the case's pods.
func setUpReal(ctx context.Context, env *benchEnv, cd *testenv.Containerd, a realAgent, o realOptions, caseName string, n int) (*realSetup, error) {
	dir := filepath.Join(env.workDir, caseName+"-controlplane")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	cp, err := testenv.StartControlPlane(ctx, testenv.ControlPlaneOptions{Dir: dir})
	if err != nil {
		return nil, err
	}
	cfg := cp.ConfigFor(testenv.AdminUser)
	cfg.QPS, cfg.Burst = 100000, 100000
	s := &realSetup{cs: kubernetes.NewForConfigOrDie(cfg), node: "node-" + caseName, label: caseName}
	s.e = &realEnv{bench: env, cp: cp, cd: cd}
	if n > 110 {
		s.e.maxPods = n
	}
	s.stop = func() {
		if s.stopTrack != nil {
			s.stopTrack()
		}
		if s.run != nil {
			s.run.stop()
		}
		// Whatever the agent left (it was stopped, or failed, midway),
		// with the pods' log directories under /var/log/pods (Splitlet's):
		// a later agent's runtime would list them again.
		rmCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := testenv.RemoveAllSandboxes(rmCtx, cd.Endpoint, testenv.PodLogRoot); err != nil {
			fmt.Fprintf(os.Stderr, "bench: removing sandboxes: %v\n", err)
		}
		cancel()
		cp.Stop()
	}
	if err := createBenchConfigMap(ctx, s.cs); err != nil {
		s.stop()
		return nil, err
	}
	if s.run, err = a.start(s.e, s.node); err != nil {
		s.stop()
		return nil, err
	}
	if err := waitFor(ctx, 2*time.Minute, s.run, "node "+s.node+" Ready", func() bool { return poll.NodeReady(ctx, s.cs, s.node) }); err != nil {
		s.stop()
		return nil, fmt.Errorf("%w (logs in %s)", err, s.run.dir)
	}
	if err := sleepCtx(ctx, o.settle); err != nil {
		s.stop()
		return nil, err
	}
	if s.tr, s.stopTrack, err = trackPods(s.cs, "bench-run="+caseName); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// createPods creates the case's n pods of the variant, 20 at a time,
// noting when each create was sent.
func (s *realSetup) createPods(ctx context.Context, variant string, n int, created []time.Time) error {
	return createPods(ctx, s.cs, n, 20, created, func(i int) *corev1.Pod { return realPod(podName(s.label, i), s.label, s.node, variant) })
}

// waitReady waits until n of the case's pods are Ready.
func (s *realSetup) waitReady(ctx context.Context, n int) error {
	if err := waitFor(ctx, 10*time.Minute, s.run, fmt.Sprintf("%d pods Ready", n), func() bool { return s.tr.ready.Load() >= int64(n) }); err != nil {
		return fmt.Errorf("%w: %d of %d Ready (logs in %s)", err, s.tr.ready.Load(), n, s.run.dir)
	}
	return nil
}

// benchConfigMap is what the probe variant's pods mount and read.
const benchConfigMap = "bench-config"

func createBenchConfigMap(ctx context.Context, cs kubernetes.Interface) error {
	_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: benchConfigMap},
		Data:       map[string]string{"ready": "yes\n"},
	}, metav1.CreateOptions{})
	return err
}

// realPod is pod i of the case: busybox sleeping, ending at once on
// SIGTERM (a bare `sleep` as PID 1 ignores it, and every pod would take
// its whole grace period to stop); the probe variant adds an exec
// readiness probe that reads a configMap volume.
func realPod(name, label, node, variant string) *corev1.Pod {
	c := corev1.Container{
		Name: "c", Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
		Command: []string{"sh", "-c", `trap "exit 0" TERM; sleep 3600 & wait`},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench-run": label}},
		Spec:       corev1.PodSpec{NodeName: node},
	}
	if variant == variantProbe {
		c.VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/etc/bench"}}
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/etc/bench/ready"}}}}
		pod.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: benchConfigMap}}}}}
	}
	pod.Spec.Containers = []corev1.Container{c}
	return pod
}

// podUIDs lists the UIDs of the labelled pods.
func podUIDs(ctx context.Context, cs kubernetes.Interface, label string) (map[types.UID]bool, error) {
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "bench-run=" + label})
	if err != nil {
		return nil, err
	}
	out := map[types.UID]bool{}
	for _, p := range list.Items {
		out[p.UID] = true
	}
	return out, nil
}

// sandboxCounts counts, of the sandboxes, those of the pods: still ready
// (not stopped), and present at all.
func sandboxCounts(sbs []*runtimeapi.PodSandbox, pods map[types.UID]bool) (ready, present int) {
	for _, sb := range sbs {
		if !pods[types.UID(sb.GetMetadata().GetUid())] {
			continue
		}
		present++
		if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready++
		}
	}
	return ready, present
}

// teardownTimes polls containerd's sandboxes every 100 ms from start until
// none of the pods' is left or wait has passed: the seconds until every one
// was stopped and until every one was removed (-1: not within the wait).
// onStopped runs when every one is first seen stopped.
func teardownTimes(ctx context.Context, endpoint string, pods map[types.UID]bool, start time.Time, wait time.Duration, onStopped func() error) (stopped, removed float64, err error) {
	rs, err := remote.NewRemoteRuntimeService(ctx, endpoint, 30*time.Second, nil, false)
	if err != nil {
		return 0, 0, err
	}
	defer rs.Close(context.Background())
	stopped, removed = -1, -1
	for time.Since(start) < wait {
		sbs, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
		if err != nil {
			return 0, 0, err
		}
		now := time.Since(start).Seconds()
		ready, present := sandboxCounts(sbs, pods)
		if ready == 0 && stopped < 0 {
			stopped = now
			if err := onStopped(); err != nil {
				return 0, 0, err
			}
		}
		if present == 0 {
			return stopped, now, nil
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return stopped, removed, nil
}

// realFlags are the real-container case's command-line flags.
type realFlags struct {
	enabled                            bool
	pods, agents, variants, report     string
	idlePods, rounds                   int
	idleDuration, settle, teardownWait time.Duration
}

func addRealFlags() *realFlags {
	f := &realFlags{}
	flag.BoolVar(&f.enabled, "real", true, "run the real-container case: Splitlet all-in-one and split and the kubelet on one containerd (root; false skips it)")
	flag.StringVar(&f.pods, "real-pods", "100,200", "pod counts of the real-container case, comma-separated (empty or 0: none)")
	flag.StringVar(&f.agents, "real-agents", "allinone,split,kubelet", "agents of the real-container case, in order (allinone-base and split-base run -base-bin's splitlet)")
	flag.StringVar(&f.variants, "real-variants", variantPlain+","+variantProbe, "pods of the real-container case: plain (busybox sleeping), probe (and an exec readiness probe reading a configMap volume)")
	flag.IntVar(&f.rounds, "real-rounds", 1, "rounds of each real-container case over the agents (their order reversed every other round); each figure is the median, with the min–max")
	flag.IntVar(&f.idlePods, "idle-pods", 110, "pods running in the real-container idle case (0: skip it)")
	flag.DurationVar(&f.idleDuration, "idle-duration", 10*time.Minute, "how long the real-container idle case measures each agent (0: skip it)")
	flag.DurationVar(&f.settle, "real-settle", 10*time.Second, "how long each agent of the real-container case runs after its node is Ready before the first pod is created (and after all are Ready before the idle window)")
	flag.DurationVar(&f.teardownWait, "real-teardown-wait", 3*time.Minute, "how long the real-container case waits, from the DeleteCollection, for every sandbox to be removed")
	flag.StringVar(&f.report, "real-report", "", "print the real-container tables of these bench JSON reports (comma-separated; runs of one agent or pod count each) and exit")
	return f
}

// options checks the flags and makes the case's options.
func (f *realFlags) options() (realOptions, error) {
	if !f.enabled {
		return realOptions{}, nil
	}
	o := realOptions{idlePods: f.idlePods, idleDuration: f.idleDuration, settle: f.settle, teardownWait: f.teardownWait, rounds: f.rounds}
	var err error
	if o.pods, err = parsePodCounts(f.pods); err != nil {
		return o, fmt.Errorf("-real-pods: %w", err)
	}
	if o.agents, err = parseNames(f.agents, "agent", []string{"allinone", "split", "kubelet", "allinone-base", "split-base"}); err != nil {
		return o, fmt.Errorf("-real-agents: %w", err)
	}
	if o.variants, err = parseNames(f.variants, "variant", []string{variantPlain, variantProbe}); err != nil {
		return o, fmt.Errorf("-real-variants: %w", err)
	}
	if len(o.agents) == 0 {
		return realOptions{}, nil
	}
	return o, nil
}

// printRealReports prints the real-container tables of the JSON reports.
func printRealReports(out io.Writer, paths string) error {
	rep, err := readRealReports(strings.Split(paths, ","))
	if err != nil {
		return err
	}
	printRealTables(out, rep)
	return nil
}

// writesByResource reads the API server's apiserver_request_total over
// mutating verbs, by "<verb> <resource>[/<subresource>]".
func writesByResource(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return parseWritesByResource(raw)
}

// parseWritesByResource is writesByResource's reading of the metrics text.
func parseWritesByResource(metrics []byte) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(metrics))
	if err != nil {
		return nil, err
	}
	fam := families["apiserver_request_total"]
	if fam == nil {
		return nil, fmt.Errorf("no apiserver_request_total in /metrics")
	}
	out := map[string]float64{}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		switch labels["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY":
		default:
			continue
		}
		key := labels["verb"] + " " + labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out, nil
}

// writesDelta is after less before, each key divided by per; keys that
// did not move are left out.
func writesDelta(before, after map[string]float64, per float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d / per
		}
	}
	return out
}
