package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/splitlet/splitlet/bench/internal/poll"
	"github.com/splitlet/splitlet/libs/testenv"
)

// result holds one agent's figures.
type result struct {
	Agent        string           `json:"agent"`
	Pods         int              `json:"pods"`
	AllReadySec  float64          `json:"allReadySeconds"`
	P50Ms        float64          `json:"p50Ms"`
	P90Ms        float64          `json:"p90Ms"`
	P99Ms        float64          `json:"p99Ms"`
	MaxMs        float64          `json:"maxMs"`
	AllGoneSec   float64          `json:"allGoneSeconds"`
	PodWritesPer float64          `json:"podWritesPerPod"`
	AllWritesPer float64          `json:"allWritesPerPod"`
	PeakRSSBytes int64            `json:"peakRSSBytes"`
	PeakRSSEach  map[string]int64 `json:"peakRSSBytesByProcess"`
	// FileRSSBytes: of the resident set, the pages of files (the
	// executables) at the end of the case; PeakRSSBytes less it is the
	// peak of what the processes allocated (see agentRun.peakRSS).
	FileRSSBytes int64            `json:"fileRSSBytes"`
	FileRSSEach  map[string]int64 `json:"fileRSSBytesByProcess"`
	// PeakPSSBytes is the peak of the agent's processes' summed PSS,
	// sampled from the first create until all pods are gone (each page
	// shared by n processes counts 1/n in each); SampledRSSBytes the peak
	// of their summed RSS over the same samples.
	PeakPSSBytes    int64            `json:"peakPSSBytes"`
	PeakPSSEach     map[string]int64 `json:"peakPSSBytesByProcess"`
	SampledRSSBytes int64            `json:"sampledPeakRSSBytes"`
	ThroughputPPS   float64          `json:"podsPerSecond"`
	// CPUSec is the agent's CPU time (user+system, all its processes) from
	// the first create until all pods are gone; CPULifeSec from its start,
	// start-up included. ControlPlaneCPUSec is etcd's and kube-apiserver's
	// over the agent's life.
	CPUSec             float64            `json:"cpuSeconds"`
	CPUEach            map[string]float64 `json:"cpuSecondsByProcess"`
	CPULifeSec         float64            `json:"cpuSecondsWholeLife"`
	ControlPlaneCPUSec float64            `json:"controlPlaneCPUSeconds"`
	// BusMsgsPerPod and BusKiBPerPod: what the nats-server delivered over
	// the whole case, per pod (split runs only).
	BusMsgsPerPod float64 `json:"busMessagesDeliveredPerPod,omitempty"`
	BusKiBPerPod  float64 `json:"busKiBDeliveredPerPod,omitempty"`
	// BusMsgsPerPodToReady and BusKiBPerPodToReady: the same from the
	// first create until every pod is Ready.
	BusMsgsPerPodToReady float64 `json:"busMessagesDeliveredPerPodToReady,omitempty"`
	BusKiBPerPodToReady  float64 `json:"busKiBDeliveredPerPodToReady,omitempty"`
	// BusPublishedPerPod: messages each stream stored, per pod.
	BusPublishedPerPod map[string]float64 `json:"busMessagesPublishedPerPodByStream,omitempty"`
	// EvictionRounds and EvictionCPUSec: the eviction manager's rounds and
	// their CPU time from the first create until all pods are gone
	// (splitlet_nodehb_eviction_*); EvictionStageCPUSec the CPU of the
	// process that runs it (nodehb; all-in-one: the whole agent) over the
	// same window.
	EvictionRounds      float64 `json:"evictionRounds,omitempty"`
	EvictionCPUSec      float64 `json:"evictionLoopCPUSeconds,omitempty"`
	EvictionStageCPUSec float64 `json:"evictionStageCPUSeconds,omitempty"`
	// Stages: where a Splitlet run's create→Ready goes, stage by stage
	// and hop by hop (splitlet_pod_stage_duration_seconds and
	// splitlet_bus_delivery_seconds, read at the end of the burst).
	Stages *stageShares `json:"stages,omitempty"`
}

// tracker follows the run's pods through a watch and records, by pod name,
// when each was first seen Running and Ready and when it was deleted.
type tracker struct {
	mu      sync.Mutex
	readyAt map[string]time.Time
	goneAt  map[string]time.Time
	ready   atomic.Int64
	gone    atomic.Int64
}

func (t *tracker) observe(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || !poll.IsPodReady(p) {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.readyAt[p.Name]; !seen {
		t.readyAt[p.Name] = now
		t.ready.Add(1)
	}
}

func (t *tracker) deleted(obj any) {
	now := time.Now()
	name := ""
	switch o := obj.(type) {
	case *corev1.Pod:
		name = o.Name
	case cache.DeletedFinalStateUnknown:
		if p, ok := o.Obj.(*corev1.Pod); ok {
			name = p.Name
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.goneAt[name]; !seen && name != "" {
		t.goneAt[name] = now
		t.gone.Add(1)
	}
}

// runCase runs one agent through the create → Ready → delete cycle of n pods
// on a control plane of its own, so that no case runs against another's
// history (etcd's size and compactions, the watch cache).
func runCase(ctx context.Context, env *benchEnv, a agent, node string, n, concurrency int) (*result, error) {
	return runCaseWith(ctx, env, a, node, n, concurrency, measureCase)
}

// measureFunc measures one agent on the control plane behind cs; the caller
// stops the returned run.
type measureFunc func(ctx context.Context, cs kubernetes.Interface, env *benchEnv, a agent, node string, n, concurrency int) (*result, *agentRun, error)

// runCaseWith runs one case, measured by measure, on a control plane of
// its own.
func runCaseWith(ctx context.Context, env *benchEnv, a agent, node string, n, concurrency int, measure measureFunc) (*result, error) {
	dir := filepath.Join(env.workDir, node+"-controlplane")
	// A later round of the same agent must not start on the etcd data of an
	// earlier one.
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	cp, err := testenv.StartControlPlane(ctx, testenv.ControlPlaneOptions{
		Dir: dir,
		APIServerArgs: []string{
			"--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
		},
	})
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	if env.controlPlaneCPUs != "" {
		if err := pin(env.controlPlaneCPUs, cp.PIDs()...); err != nil {
			return nil, err
		}
	}
	cfg := cp.ConfigFor(testenv.AdminUser)
	cfg.QPS, cfg.Burst = 100000, 100000
	cs := kubernetes.NewForConfigOrDie(cfg)
	caseEnv := *env
	caseEnv.kubeconfig, caseEnv.caFile = cp.Kubeconfig, cp.CAFile
	cpCPUStart, err := cpuSeconds(cp.PIDs())
	if err != nil {
		return nil, err
	}
	res, run, err := measure(ctx, cs, &caseEnv, a, node, n, concurrency)
	if run != nil {
		defer run.stop()
	}
	if err != nil {
		return nil, err
	}
	evictionNow, err := run.evictionCost(ctx)
	if err != nil {
		return nil, fmt.Errorf("eviction figures: %w", err)
	}
	res.CPUEach = map[string]float64{}
	for i, pid := range run.pids() {
		sec, err := cpuSeconds([]int{pid})
		if err != nil {
			return nil, err
		}
		res.CPULifeSec += sec
		sec -= run.cpuAtCreate[i]
		res.CPUEach[run.names[i]] += sec
		res.CPUSec += sec
	}
	res.setEviction(run.evictionAtCreate, evictionNow)
	bus, err := run.busTraffic()
	if err != nil {
		return nil, fmt.Errorf("bus figures: %w", err)
	}
	res.BusMsgsPerPod = float64(bus.OutMsgs) / float64(n)
	res.BusKiBPerPod = float64(bus.OutBytes) / 1024 / float64(n)
	for name, msgs := range bus.Streams {
		if res.BusPublishedPerPod == nil {
			res.BusPublishedPerPod = map[string]float64{}
		}
		res.BusPublishedPerPod[name] = float64(msgs) / float64(n)
	}
	cpCPU, err := cpuSeconds(cp.PIDs())
	if err != nil {
		return nil, err
	}
	res.ControlPlaneCPUSec = cpCPU - cpCPUStart
	return res, nil
}

// measureCase starts the agent on the control plane behind cs and measures
// it; the caller stops the returned run.
func measureCase(ctx context.Context, cs kubernetes.Interface, env *benchEnv, a agent, node string, n, concurrency int) (*result, *agentRun, error) {
	run, err := startReady(ctx, cs, env, a, node)
	if err != nil {
		return nil, run, err
	}
	label := "bench-run=" + a.name
	tr, stopTrack, err := trackPods(cs, label)
	if err != nil {
		return nil, run, err
	}
	defer stopTrack()
	res := &result{Agent: a.name, Pods: n}
	if err := measureCreate(ctx, cs, env, a, run, tr, node, n, concurrency, res); err != nil {
		return nil, run, err
	}
	if err := measureDelete(ctx, cs, env, a, run, tr, label, n, res); err != nil {
		return nil, run, err
	}
	pss, rss, err := run.mem.end()
	if err != nil {
		return nil, run, err
	}
	res.PeakPSSBytes, res.PeakPSSEach, res.SampledRSSBytes = pss.total, pss.each, rss.total
	peak, files, err := run.peakRSS()
	if err != nil {
		return nil, run, err
	}
	res.PeakRSSBytes, res.PeakRSSEach, res.FileRSSBytes, res.FileRSSEach = peak.total, peak.each, files.total, files.each
	return res, run, nil
}

// measureBacklog measures how fast an agent drains pods that exist before
// it starts (a node agent restarted, or a node joining with pods bound to
// it): the n pods are created first, then the agent is started, and the
// figures run from its start until every pod is Ready. Creation speed does
// not bound them, as it can in the burst case.
func measureBacklog(ctx context.Context, cs kubernetes.Interface, env *benchEnv, a agent, node string, n, concurrency int) (*result, *agentRun, error) {
	if !a.registersNode {
		if err := createNode(ctx, cs, node); err != nil {
			return nil, nil, err
		}
	}
	label := "bench-run=" + a.name
	tr, stopTrack, err := trackPods(cs, label)
	if err != nil {
		return nil, nil, err
	}
	defer stopTrack()
	if err := createPods(ctx, cs, n, concurrency, make([]time.Time, n), func(i int) *corev1.Pod { return benchPod(a.name, node, i) }); err != nil {
		return nil, nil, err
	}
	start := time.Now()
	run, err := a.start(ctx, env, node)
	if err != nil {
		return nil, run, err
	}
	if err := run.markCreate(true); err != nil {
		return nil, run, err
	}
	if err := waitFor(ctx, 15*time.Minute, run, fmt.Sprintf("%d pods Ready", n), func() bool { return tr.ready.Load() >= int64(n) }); err != nil {
		return nil, run, fmt.Errorf("%w: %d of %d Ready (logs in %s)", err, tr.ready.Load(), n, run.dir)
	}
	res := &result{Agent: a.name, Pods: n}
	started := make([]time.Time, n)
	for i := range started {
		started[i] = start
	}
	lat, last := tr.latencies(a.name, started, start)
	res.AllReadySec = last.Sub(start).Seconds()
	res.ThroughputPPS = float64(n) / res.AllReadySec
	res.P50Ms, res.P90Ms, res.P99Ms, res.MaxMs = pct(lat, 50), pct(lat, 90), pct(lat, 99), lat[len(lat)-1]
	if err := measureDelete(ctx, cs, env, a, run, tr, label, n, res); err != nil {
		return nil, run, err
	}
	pss, rss, err := run.mem.end()
	if err != nil {
		return nil, run, err
	}
	res.PeakPSSBytes, res.PeakPSSEach, res.SampledRSSBytes = pss.total, pss.each, rss.total
	return res, run, nil
}

// startReady starts the agent (its Node made first when it registers
// none) and waits for the node to be Ready: every agent, the ideal one
// too, has synced before the first pod is created.
func startReady(ctx context.Context, cs kubernetes.Interface, env *benchEnv, a agent, node string) (*agentRun, error) {
	if !a.registersNode {
		if err := createNode(ctx, cs, node); err != nil {
			return nil, err
		}
	}
	run, err := a.start(ctx, env, node)
	if err != nil {
		return run, err
	}
	if err := waitFor(ctx, 90*time.Second, run, "node "+node+" Ready", func() bool { return poll.NodeReady(ctx, cs, node) }); err != nil {
		return run, fmt.Errorf("%w (logs in %s)", err, run.dir)
	}
	return run, nil
}

// trackPods watches the pods with label until stop is called, noting when
// each is Ready and gone.
func trackPods(cs kubernetes.Interface, label string) (tr *tracker, stop func(), err error) {
	tr = &tracker{readyAt: map[string]time.Time{}, goneAt: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = label }))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: tr.observe, UpdateFunc: func(_, o any) { tr.observe(o) }, DeleteFunc: tr.deleted,
	}); err != nil {
		return nil, nil, err
	}
	stopCh := make(chan struct{})
	factory.Start(stopCh)
	factory.WaitForCacheSync(stopCh)
	return tr, func() { close(stopCh) }, nil
}

// profileCPU takes a CPU profile of the agent, named prefix, in the
// background when profiles are asked for; the channel gives its outcome.
func profileCPU(env *benchEnv, run *agentRun, prefix string) <-chan error {
	done := make(chan error, 1)
	if env.profileDir == "" || len(run.health) == 0 {
		done <- nil
		return done
	}
	go func() {
		done <- run.saveProfile(env.profileDir, prefix, fmt.Sprintf("profile?seconds=%d", int(env.cpuProfile.Seconds())))
	}()
	return done
}

// measureCreate creates the n pods, waits for all of them Ready and fills
// in the creation figures: latencies, bus traffic, API writes, the stages'
// breakdown.
func measureCreate(ctx context.Context, cs kubernetes.Interface, env *benchEnv, a agent, run *agentRun, tr *tracker, node string, n, concurrency int, res *result) error {
	before, err := writeCounts(ctx, cs)
	if err != nil {
		return err
	}
	created := make([]time.Time, n)
	cpuProfiled := profileCPU(env, run, a.name)
	busAtStart, err := run.busTraffic()
	if err != nil {
		return fmt.Errorf("bus figures: %w", err)
	}
	if err := run.markCreate(false); err != nil {
		return err
	}
	start := time.Now()
	if err := createPods(ctx, cs, n, concurrency, created, func(i int) *corev1.Pod { return benchPod(a.name, node, i) }); err != nil {
		return err
	}
	if err := waitFor(ctx, 15*time.Minute, run, fmt.Sprintf("%d pods Ready", n), func() bool { return tr.ready.Load() >= int64(n) }); err != nil {
		return fmt.Errorf("%w: %d of %d Ready (logs in %s)", err, tr.ready.Load(), n, run.dir)
	}
	busAtReady, err := run.busTraffic()
	if err != nil {
		return fmt.Errorf("bus figures: %w", err)
	}
	if err := saveHeapProfiles(env, run, a.name); err != nil {
		return err
	}
	after, err := writeCounts(ctx, cs)
	if err != nil {
		return err
	}
	res.BusMsgsPerPodToReady = float64(busAtReady.OutMsgs-busAtStart.OutMsgs) / float64(n)
	res.BusKiBPerPodToReady = float64(busAtReady.OutBytes-busAtStart.OutBytes) / 1024 / float64(n)
	if a.name == "split" || a.name == "allinone" {
		if res.Stages, err = readBreakdown(ctx, run); err != nil {
			return fmt.Errorf("the stages' histograms: %w", err)
		}
	}
	lat, last := tr.latencies(a.name, created, start)
	res.AllReadySec = last.Sub(start).Seconds()
	res.ThroughputPPS = float64(n) / res.AllReadySec
	res.P50Ms, res.P90Ms, res.P99Ms, res.MaxMs = pct(lat, 50), pct(lat, 90), pct(lat, 99), lat[len(lat)-1]
	res.PodWritesPer = float64(after.pods-before.pods-float64(n)) / float64(n)
	res.AllWritesPer = float64(after.all-before.all-float64(n)) / float64(n)
	if err := <-cpuProfiled; err != nil {
		return fmt.Errorf("CPU profiles: %w", err)
	}
	return nil
}

// markCreate notes each process's CPU time as the first pod is created
// and starts sampling their memory. A case whose agent has just started
// (the backlog) leaves the eviction counters at zero, as they are then,
// without asking processes that may not serve their metrics yet.
func (r *agentRun) markCreate(freshAgent bool) error {
	r.cpuAtCreate = r.cpuAtCreate[:0]
	for _, pid := range r.pids() {
		sec, err := cpuSeconds([]int{pid})
		if err != nil {
			return err
		}
		r.cpuAtCreate = append(r.cpuAtCreate, sec)
	}
	r.mem = sampleMemory(r.pids(), r.names, memSampleEvery)
	if freshAgent {
		r.evictionAtCreate = evictionCost{}
		return nil
	}
	var err error
	r.evictionAtCreate, err = r.evictionCost(context.Background())
	return err
}

// memSampleEvery: how often the agents' memory is sampled.
const memSampleEvery = 200 * time.Millisecond

// saveHeapProfiles saves the agent's heap profiles when asked for.
func saveHeapProfiles(env *benchEnv, run *agentRun, prefix string) error {
	if env.profileDir == "" {
		return nil
	}
	for _, kind := range []string{"heap", "heap?debug=1"} {
		if err := run.saveProfile(env.profileDir, prefix, kind); err != nil {
			return fmt.Errorf("heap profiles: %w", err)
		}
	}
	return nil
}

// latencies are the pods' create→Ready times in milliseconds, sorted, and
// the moment the last one became Ready (start if none did later).
func (tr *tracker) latencies(agent string, created []time.Time, start time.Time) ([]float64, time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	lat := make([]float64, 0, len(created))
	last := start
	for i := range created {
		at := tr.readyAt[podName(agent, i)]
		lat = append(lat, float64(at.Sub(created[i]).Microseconds())/1000)
		if at.After(last) {
			last = at
		}
	}
	slices.Sort(lat)
	return lat, last
}

// measureDelete deletes the pods and waits until all are gone. The
// deletion has a CPU profile of its own (prefix <agent>-delete), from the
// DeleteCollection on: most of an agent's work is there.
func measureDelete(ctx context.Context, cs kubernetes.Interface, env *benchEnv, a agent, run *agentRun, tr *tracker, label string, n int, res *result) error {
	deleteProfiled := profileCPU(env, run, a.name+"-delete")
	delStart := time.Now()
	if err := deleteCollection(ctx, cs, label); err != nil {
		return err
	}
	if err := waitFor(ctx, 10*time.Minute, run, fmt.Sprintf("%d pods gone", n), func() bool { return tr.gone.Load() >= int64(n) }); err != nil {
		return fmt.Errorf("%w: %d of %d gone (logs in %s)", err, tr.gone.Load(), n, run.dir)
	}
	if err := <-deleteProfiled; err != nil {
		return fmt.Errorf("CPU profiles of the deletion: %w", err)
	}
	tr.mu.Lock()
	lastGone := delStart
	for _, at := range tr.goneAt {
		if at.After(lastGone) {
			lastGone = at
		}
	}
	tr.mu.Unlock()
	res.AllGoneSec = lastGone.Sub(delStart).Seconds()
	return nil
}

func pct(sorted []float64, p int) float64 {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(min(i, len(sorted))-1, 0)]
}

// podName is a DNS label (the API server warns about, and every client logs,
// a pod name with a dot, such as one made from "kwok-v0.7.0").
func podName(agent string, i int) string {
	return fmt.Sprintf("bench-%s-%05d", strings.ReplaceAll(agent, ".", "-"), i)
}

// createPods creates pods 0 to n-1 (pod makes pod i) at the given
// concurrency, noting in created when each create was sent.
func createPods(ctx context.Context, cs kubernetes.Interface, n, concurrency int, created []time.Time, pod func(i int) *corev1.Pod) error {
	var next atomic.Int64
	errs := make(chan error, concurrency)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				p := pod(i)
				created[i] = time.Now()
				if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create %s: %w", p.Name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// benchPod is pod i of agent's case: a sleeping busybox that tolerates
// every taint.
func benchPod(agent, node string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(agent, i), Labels: map[string]string{"bench-run": agent}},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Containers:  []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "infinity"}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
}

func createNode(ctx context.Context, cs kubernetes.Interface, node string) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("4Ti"),
		corev1.ResourcePods:   resource.MustParse("20000"),
	}
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"type": "kwok", "kubernetes.io/hostname": node},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}, metav1.CreateOptions{})
	return err
}

// waitFor checks cond every 20 ms (poll.Until) while the agent runs.
func waitFor(ctx context.Context, timeout time.Duration, run *agentRun, what string, cond func() bool) error {
	return poll.Until(ctx, timeout, 20*time.Millisecond, what, func() (bool, string, error) {
		if cond() {
			return true, "", nil
		}
		if err := run.alive(); err != nil {
			return false, "", fmt.Errorf("waiting for %s: %w", what, err)
		}
		return false, "", nil
	})
}

type writes struct{ pods, all float64 }

// writeCounts sums the API server's apiserver_request_total over mutating
// verbs: for pods (and their subresources), and for every resource.
func writeCounts(ctx context.Context, cs kubernetes.Interface) (writes, error) {
	each, err := writesByResource(ctx, cs)
	if err != nil {
		return writes{}, err
	}
	return sumWrites(each), nil
}

// sumWrites sums writesByResource's figures (keyed "VERB
// resource[/subresource]"): those of pods, and all.
func sumWrites(each map[string]float64) writes {
	var w writes
	for key, v := range each {
		w.all += v
		_, res, _ := strings.Cut(key, " ")
		if res, _, _ = strings.Cut(res, "/"); res == "pods" {
			w.pods += v
		}
	}
	return w
}

// cpuSeconds sums the user and system CPU time of the processes so far.
func cpuSeconds(pids []int) (float64, error) {
	var ticks int64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, fmt.Errorf("pid %d: %w", pid, err)
		}
		// Fields after the command name (which may hold spaces) in ")".
		rest := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		// utime and stime are fields 14 and 15 of stat: 12 and 13 of rest.
		for _, f := range rest[11:13] {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("pid %d stat: %w", pid, err)
			}
			ticks += v
		}
	}
	return float64(ticks) / clockTicks, nil
}

// clockTicks is USER_HZ, 100 on every Linux platform Go supports.
const clockTicks = 100

// median is a result whose every figure is the median of the rounds' (the
// per-process breakdowns are the first round's).
func median(rs []*result) *result {
	if len(rs) == 1 {
		return rs[0]
	}
	out := *rs[0]
	for _, f := range []func(*result) *float64{
		func(r *result) *float64 { return &r.AllReadySec },
		func(r *result) *float64 { return &r.P50Ms },
		func(r *result) *float64 { return &r.P90Ms },
		func(r *result) *float64 { return &r.P99Ms },
		func(r *result) *float64 { return &r.MaxMs },
		func(r *result) *float64 { return &r.AllGoneSec },
		func(r *result) *float64 { return &r.PodWritesPer },
		func(r *result) *float64 { return &r.AllWritesPer },
		func(r *result) *float64 { return &r.ThroughputPPS },
		func(r *result) *float64 { return &r.CPUSec },
		func(r *result) *float64 { return &r.CPULifeSec },
		func(r *result) *float64 { return &r.ControlPlaneCPUSec },
		func(r *result) *float64 { return &r.BusMsgsPerPod },
		func(r *result) *float64 { return &r.BusKiBPerPod },
		func(r *result) *float64 { return &r.BusMsgsPerPodToReady },
		func(r *result) *float64 { return &r.BusKiBPerPodToReady },
		func(r *result) *float64 { return &r.EvictionCPUSec },
		func(r *result) *float64 { return &r.EvictionStageCPUSec },
	} {
		vals := make([]float64, len(rs))
		for i, r := range rs {
			vals[i] = *f(r)
		}
		*f(&out) = medianOf(vals)
	}
	for _, f := range []func(*result) *int64{
		func(r *result) *int64 { return &r.PeakRSSBytes },
		func(r *result) *int64 { return &r.PeakPSSBytes },
		func(r *result) *int64 { return &r.SampledRSSBytes },
		func(r *result) *int64 { return &r.FileRSSBytes },
	} {
		vals := make([]float64, len(rs))
		for i, r := range rs {
			vals[i] = float64(*f(r))
		}
		*f(&out) = int64(medianOf(vals))
	}
	return &out
}

func medianOf(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pin moves every thread of the processes to the CPU list (taskset -a).
func pin(cpus string, pids ...int) error {
	for _, pid := range pids {
		if out, err := exec.Command("taskset", "-a", "-cp", cpus, strconv.Itoa(pid)).CombinedOutput(); err != nil {
			return fmt.Errorf("taskset %s %d: %v: %s", cpus, pid, err, out)
		}
	}
	return nil
}

// deleteCollection deletes the labelled pods in one DeleteCollection. On a
// slow machine the API server can run past its request timeout on thousands
// of graceful deletes and reset the stream halfway; the call is idempotent,
// so it is repeated (a few times) for what is left.
func deleteCollection(ctx context.Context, cs kubernetes.Interface, label string) error {
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		err = cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: label})
		if err == nil || ctx.Err() != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: DeleteCollection (attempt %d): %v; repeating for the pods left\n", attempt, err)
	}
	return fmt.Errorf("DeleteCollection: %w", err)
}
