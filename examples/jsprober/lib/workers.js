// The probe manager and its workers: one worker per (pod, container, probe
// type), each running its probe every period and keeping the result of the
// container's current ID; only a changed result reaches the sink.
//
// One run of a worker, in order (the kubelet's probe worker, and Splitlet's
// prober, services/prober/internal/workers/worker.go):
//  1. No runtime status for the pod yet: wait.
//  2. The pod is terminal (phase Succeeded or Failed, or terminated: true):
//     the worker ends.
//  3. The container has no status or no ID yet: wait.
//  4. A new container ID: the old ID's result is forgotten, the new one gets
//     the initial result (readiness Failure, liveness Success, startup
//     Unknown) unless it was running well before the prober started, and
//     any hold is lifted.
//  5. On hold (after a liveness Failure, or once the startup probe decided):
//     wait for a new container ID.
//  6. Not running: Failure ("container is not running").
//  7. The pod is being deleted: liveness and startup report Success and end.
//  8. Before initialDelaySeconds since the container started: wait.
//  9. Startup gating: until the startup probe succeeded only it runs; after,
//     only liveness and readiness.
// 10. Run the probe; the result changes only after successThreshold
//     successes or failureThreshold failures in a row.
// 11. A liveness Failure, or any startup result, puts the worker on hold.
import * as probes from "./probes.js";

const PROBE_TYPES = ["Startup", "Readiness", "Liveness"];
const INITIAL = { Readiness: "Failure", Liveness: "Success", Startup: "Unknown" };
const MAX_MESSAGE = 1024;

const terminalPhase = (p) => p === "Succeeded" || p === "Failed";
const specOf = (c, type) => ({ Startup: c.startupProbe, Readiness: c.readinessProbe, Liveness: c.livenessProbe })[type];

// withDefaults fills the API server's defaults into unset fields.
function withDefaults(p) {
  const pos = (v, d) => (Number.isInteger(v) && v > 0 ? v : d);
  return {
    ...p,
    timeoutSeconds: pos(p.timeoutSeconds, 1),
    periodSeconds: pos(p.periodSeconds, 10),
    successThreshold: pos(p.successThreshold, 1),
    failureThreshold: pos(p.failureThreshold, 3),
    initialDelaySeconds: Number.isInteger(p.initialDelaySeconds) ? p.initialDelaySeconds : 0,
  };
}

// probedContainers: the regular containers and the restartable init
// containers (sidecars), the ones the kubelet probes.
function probedContainers(pod) {
  const out = (pod.spec?.containers ?? []).map((c) => ({ container: c, init: false }));
  for (const c of pod.spec?.initContainers ?? []) {
    if (c.restartPolicy === "Always") out.push({ container: c, init: true });
  }
  return out;
}

function containerStatus(st, name) {
  const regular = st.containerStatuses ?? [];
  return regular.find((c) => c.name === name && c.containerID) ??
    (st.initContainerStatuses ?? []).find((c) => c.name === name) ??
    regular.find((c) => c.name === name);
}

// willRestart: whether a terminated container runs again (its own
// restartPolicy if set, else the pod's).
function willRestart(c, pod, exitCode) {
  const policy = { Always: "Always", Never: "Never", OnFailure: "OnFailure" }[c.restartPolicy] ?? pod.spec?.restartPolicy ?? "Always";
  if (policy === "Never") return false;
  if (policy === "OnFailure") return exitCode !== 0;
  return true;
}

export class Manager {
  // sink(result) gets every changed result; exec(worker, cmd, timeoutMs)
  // runs an exec probe's command and resolves to { outcome, message, counted }.
  constructor({ log, sink, exec, restartGraceMs = 10_000 }) {
    Object.assign(this, { log, sink, exec, restartGraceMs });
    this.start = Date.now();
    this.pods = new Map(); // uid → { source, pod }
    this.workers = new Map(); // uid/container/type → Worker
    this.status = new Map(); // uid → PodRuntimeStatus payload
    this.results = new Map(); // type/containerID → outcome
    this.closed = false;
  }

  // upsertPod takes a pod of an ADD, UPDATE, DELETE or SET. A new pod gets
  // its workers; for a known pod the spec is refreshed (it carries
  // deletionTimestamp to the workers). Probes are immutable in a pod.
  upsertPod(source, pod) {
    if (this.closed) return;
    const uid = pod.metadata.uid;
    const known = this.pods.get(uid);
    if (known) {
      known.pod = pod;
      known.source = source;
      return;
    }
    const entry = { source, pod };
    this.pods.set(uid, entry);
    for (const { container, init } of probedContainers(pod)) {
      for (const type of PROBE_TYPES) {
        const spec = specOf(container, type);
        if (!spec) continue;
        const key = workerKey(uid, container.name, type);
        if (this.workers.has(key)) continue;
        const w = new Worker(this, key, entry, container, init, type, withDefaults(spec));
        this.workers.set(key, w);
        // A prober that has just started spreads its first probes over a period.
        const period = w.spec.periodSeconds * 1000;
        w.begin(Date.now() - this.start < period ? Math.random() * period : 0);
      }
    }
    this.log.debug("pod added", { ...podFields(pod), workers: this.workers.size });
  }

  removePod(uid) {
    const known = this.pods.delete(uid);
    for (const [key, w] of this.workers) if (w.uid === uid) w.stop(key);
    this.status.delete(uid);
    if (known) this.log.debug("pod removed", { uid });
  }

  // syncSource applies a SET: the source's pods in scope (its partition)
  // are exactly pods; the others of that source in scope go.
  syncSource(source, inScope, pods) {
    const listed = new Set(pods.map((p) => p.metadata.uid));
    for (const [uid, e] of this.pods) {
      if (e.source === source && !listed.has(uid) && inScope(uid)) this.removePod(uid);
    }
    for (const p of pods) this.upsertPod(source, p);
  }

  // updateStatus stores a pod's runtime status, and has the readiness
  // worker of a started container that is not yet ready probe at once.
  updateStatus(st) {
    const known = this.pods.has(st.uid);
    if (!known && st.terminated) {
      this.status.delete(st.uid); // a finished pod the prober never saw needs nothing
      return;
    }
    this.status.set(st.uid, st);
    if (!known) return;
    for (const cs of [...(st.containerStatuses ?? []), ...(st.initContainerStatuses ?? [])]) {
      if (!cs.state?.running || !cs.containerID || !this.isStarted(st.uid, cs)) continue;
      if (this.results.get(resultKey("Readiness", cs.containerID)) === "Success") continue;
      this.workers.get(workerKey(st.uid, cs.name, "Readiness"))?.trigger();
    }
  }

  // isStarted: running, and its startup probe (if any) has succeeded.
  isStarted(uid, cs) {
    if (!cs.state?.running) return false;
    const r = this.results.get(resultKey("Startup", cs.containerID));
    if (r !== undefined) return r === "Success";
    if (this.startedBeforeUs(cs)) return true;
    return !this.workers.has(workerKey(uid, cs.name, "Startup"));
  }

  // startedBeforeUs: running since well before this prober started (kubelet:
  // restart grace), so a restarted prober keeps ready containers ready.
  startedBeforeUs(cs) {
    const at = Date.parse(cs.state?.running?.startedAt ?? "");
    return Number.isFinite(at) && at < this.start - this.restartGraceMs;
  }

  setResult(w, outcome, message) {
    const k = resultKey(w.type, w.containerID);
    if (this.results.get(k) === outcome) return;
    this.results.set(k, outcome);
    const pod = w.entry.pod;
    const r = {
      podUID: w.uid, namespace: pod.metadata.namespace, name: pod.metadata.name, container: w.container.name,
      containerID: w.containerID, probe: w.type, result: outcome,
    };
    if (outcome === "Failure" && message) r.message = message.slice(0, MAX_MESSAGE);
    this.sink(r);
  }

  forgetResult(type, containerID) {
    this.results.delete(resultKey(type, containerID));
  }

  // stop ends every worker, cancelling probes in flight, and waits for them.
  async stop() {
    this.closed = true;
    const all = [...this.workers.entries()];
    for (const [key, w] of all) w.stop(key);
    await Promise.all(all.map(([, w]) => w.done));
  }
}

const workerKey = (uid, container, type) => `${uid}\u0000${container}\u0000${type}`;
const resultKey = (type, id) => `${type}\u0000${id}`;

export const podFields = (pod) => ({ pod: `${pod.metadata.namespace}/${pod.metadata.name}`, uid: pod.metadata.uid });

class Worker {
  constructor(m, key, entry, container, isInit, type, spec) {
    Object.assign(this, { m, key, entry, container, isInit, type, spec });
    this.uid = entry.pod.metadata.uid;
    this.period = spec.periodSeconds * 1000;
    this.initial = INITIAL[type];
    this.containerID = "";
    this.lastResult = "";
    this.resultRun = 0;
    this.onHold = false;
    this.running = false;
    this.ran = false;
    this.stopped = false;
    this.abort = new AbortController();
    this.done = new Promise((resolve) => (this.finished = resolve));
  }

  begin(delay) {
    this.next = Date.now() + delay;
    this.timer = setTimeout(() => this.tick(), delay);
  }

  // tick is one run; the next falls on the period grid from the first,
  // at once when this one ran late.
  async tick() {
    if (this.stopped) return this.finish();
    this.running = true;
    let keep = true;
    try {
      keep = await this.doProbe();
    } catch (err) {
      this.m.log.error("probe run failed", { ...this.fields(), error: String(err?.stack ?? err) });
    }
    this.running = false;
    this.ran = true;
    if (!keep || this.stopped) {
      this.stopped = true;
      return this.finish();
    }
    const now = Date.now();
    this.next = Math.max(this.next + this.period, now);
    this.timer = setTimeout(() => this.tick(), this.next - now);
  }

  // trigger runs the probe now (unless one runs or the first has not yet).
  trigger() {
    if (this.stopped || this.running || !this.ran) return;
    clearTimeout(this.timer);
    this.next = Date.now();
    this.timer = setTimeout(() => this.tick(), 0);
  }

  stop() {
    if (this.stopped) return;
    this.stopped = true;
    this.abort.abort();
    if (!this.running) {
      clearTimeout(this.timer);
      this.finish();
    }
  }

  finish() {
    if (this.ended) return;
    this.ended = true;
    if (this.containerID) this.m.forgetResult(this.type, this.containerID);
    if (this.m.workers.get(this.key) === this) this.m.workers.delete(this.key);
    this.finished();
  }

  fields() {
    return { ...podFields(this.entry.pod), container: this.container.name, probe: this.type };
  }

  set(outcome, message) {
    this.m.setResult(this, outcome, message);
  }

  // doProbe is one run; false ends the worker.
  async doProbe() {
    const pod = this.entry.pod;
    if (terminalPhase(pod.status?.phase)) return false;
    const st = this.m.status.get(this.uid);
    if (!st) return true;
    if (terminalPhase(st.phase) || st.terminated) return false;
    const cs = containerStatus(st, this.container.name);
    if (!cs || !cs.containerID) return true;
    if (cs.containerID !== this.containerID) {
      if (this.containerID) this.m.forgetResult(this.type, this.containerID);
      this.containerID = cs.containerID;
      if (this.isInit && this.type === "Startup" && cs.started) this.set("Success", "");
      if (!this.m.startedBeforeUs(cs)) this.set(this.initial, "");
      this.onHold = false;
      this.lastResult = "";
      this.resultRun = 0;
    }
    if (this.onHold) return true;
    const running = cs.state?.running;
    if (!running) {
      this.set("Failure", "container is not running");
      if (!cs.state?.terminated) return true;
      return this.isInit || willRestart(this.container, pod, cs.state.terminated.exitCode ?? 0);
    }
    if (pod.metadata.deletionTimestamp && this.type !== "Readiness") {
      // kubelet rule: a pod being deleted is not restarted by its probes.
      this.set("Success", "");
      return false;
    }
    const startedAt = Date.parse(running.startedAt ?? "");
    if (Number.isFinite(startedAt) && Math.trunc((Date.now() - startedAt) / 1000) < this.spec.initialDelaySeconds) return true;
    if (this.m.isStarted(this.uid, cs) === (this.type === "Startup")) return true;

    const { outcome, message, counted } = await this.run(pod, st);
    // The pod may have gone, finished or begun deleting while the probe ran:
    // then its result is not one to publish.
    const now = this.m.status.get(this.uid);
    if (this.stopped || !now || now.terminated ||
        (this.entry.pod.metadata.deletionTimestamp && this.type !== "Readiness")) return true;
    if (!counted) return true;
    if (this.lastResult === outcome) {
      this.resultRun++;
    } else {
      this.lastResult = outcome;
      this.resultRun = 1;
    }
    if ((outcome === "Failure" && this.resultRun < this.spec.failureThreshold) ||
        (outcome === "Success" && this.resultRun < this.spec.successThreshold)) return true;
    this.set(outcome, message);
    if ((this.type === "Liveness" && outcome === "Failure") || this.type === "Startup") {
      // The container is restarted (liveness) or decided (startup): nothing
      // to do until a new container ID.
      this.onHold = true;
      this.resultRun = 0;
    }
    return true;
  }

  // run executes the probe action once. counted is false when the runtime
  // could not be asked at all (an errored probe is not a result).
  async run(pod, st) {
    const timeoutMs = this.spec.timeoutSeconds * 1000;
    const signal = this.abort.signal;
    const h = this.spec;
    let r;
    try {
      if (h.exec) {
        const cmd = probes.expandCommand(h.exec.command ?? [], this.container.env);
        const out = await this.m.exec(this, cmd, timeoutMs);
        if (!out.counted) {
          if (!signal.aborted) this.m.log.info("probe could not run", { ...this.fields(), error: out.message });
          return out;
        }
        r = out;
      } else if (h.httpGet) {
        r = await probes.httpGet(probes.httpRequest(h.httpGet, this.container, st.podIP ?? ""), timeoutMs, signal);
      } else if (h.tcpSocket) {
        const port = probes.resolvePort(h.tcpSocket.port, this.container);
        r = await probes.tcp(h.tcpSocket.host || st.podIP || "", port, timeoutMs, signal);
      } else if (h.grpc) {
        r = await probes.grpc(st.podIP ?? "", h.grpc.port, h.grpc.service, timeoutMs, signal);
      } else {
        throw new Error(`missing probe handler for ${pod.metadata.namespace}/${pod.metadata.name}:${this.container.name}`);
      }
    } catch (err) {
      // As Splitlet's prober: a probe that cannot be built (an unknown port
      // name) is a counted Failure with the cause as its message.
      return { outcome: "Failure", message: err.message, counted: true };
    }
    if (r.outcome) return r;
    return { outcome: r.result === "failure" ? "Failure" : "Success", message: r.message, counted: true };
  }
}
