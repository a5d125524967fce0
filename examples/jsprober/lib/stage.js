// The stage: pod specs from podupdates.* and runtime status from
// podstatus.* (durable consumers "prober" and "prober-status") feed the
// probe manager; changed results go to probes.<p>; exec probes go to
// runtime.probeexec.<p> as ExecRequest.
import { Buffer } from "node:buffer";
import * as bus from "./bus.js";
import { Manager, podFields } from "./workers.js";
import { goDuration, goQuote } from "./probes.js";

export const DURABLE_POD_UPDATES = "prober";
export const DURABLE_POD_STATUS = "prober-status";
const MAX_OUTPUT = 10 << 10;

export class Stage {
  constructor({ nc, js, jsm, cfg, log }) {
    Object.assign(this, { nc, js, jsm, cfg, log });
    this.node = cfg.nodeName;
    this.subjects = bus.subjects(this.node);
    // as a shadow (the shadow key): durables of its own, results under the
    // shadow prefix, the same inputs.
    this.shadow = cfg.shadow;
    this.results = cfg.shadow ? this.subjects.shadow("prober") : this.subjects;
    this.durables = cfg.shadow
      ? { podUpdates: bus.shadowDurable(DURABLE_POD_UPDATES), podStatus: bus.shadowDurable(DURABLE_POD_STATUS) }
      : { podUpdates: DURABLE_POD_UPDATES, podStatus: DURABLE_POD_STATUS };
    this.pub = new bus.Publisher(nc, js, this.node, cfg.instance);
    this.mgr = new Manager({ log, sink: (r) => this.put(r), exec: (w, cmd, t) => this.exec(w, cmd, t) });
    this.snapshots = new bus.Snapshots();
    this.consumers = [];
    this.ready = false;
    this.lastError = "not consuming the bus yet";
    this.stopping = false;
    this.pending = new Map(); // uid/container/probe → ProbeResult not yet sent
    this.wake = null;
  }

  start() {
    this.outbox = this.runOutbox();
    this.subscribing = this.subscribe();
  }

  // subscribe retries until the streams and both consumers are there.
  async subscribe() {
    for (let attempt = 0; !this.stopping; attempt++) {
      try {
        await bus.ensureStreams(this.jsm, this.node, this.cfg.natsReplicas, { shadow: this.shadow });
        if (this.consumers.length === 0) {
          // Pods and statuses live in memory only: each start reads the
          // streams' whole history again rather than resuming the durables.
          for (const [what, durable] of [["podstatus", this.durables.podStatus], ["podupdates", this.durables.podUpdates]]) {
            try {
              await this.jsm.consumers.delete(bus.streamName(this.node, what), durable);
            } catch (err) {
              if (!bus.isNotFound(err)) throw new Error(`reset consumer ${durable}: ${err.message}`);
            }
          }
        }
        if (this.consumers.length < 1) {
          this.consumers.push(await bus.consume(this.js, this.jsm, {
            stream: bus.streamName(this.node, "podstatus"), durable: this.durables.podStatus, filter: this.subjects.podStatusAll, log: this.log,
            inactiveMs: this.shadow ? 3600 * 1000 : 0,
          }, (s, e) => this.onStatus(s, e)));
        }
        if (this.consumers.length < 2) {
          this.consumers.push(await bus.consume(this.js, this.jsm, {
            stream: bus.streamName(this.node, "podupdates"), durable: this.durables.podUpdates, filter: this.subjects.podUpdatesAll, log: this.log,
            inactiveMs: this.shadow ? 3600 * 1000 : 0,
          }, (s, e) => this.onPodUpdate(s, e)));
        }
        this.ready = true;
        this.lastError = "";
        this.log.info("consuming pod updates and pod status", { durable: this.durables.podUpdates, statusDurable: this.durables.podStatus, shadow: this.shadow });
        return;
      } catch (err) {
        this.lastError = `not consuming the bus: ${err.message}`;
        if (attempt % 10 === 0) this.log.warn("cannot consume the bus yet, retrying", { error: err.message });
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  onPodUpdate(subject, e) {
    let u;
    try {
      u = bus.decodePodUpdate(e);
    } catch (err) {
      // It will not decode next time either: dropped.
      this.log.error("dropping bad pod update", { subject, error: err.message });
      return;
    }
    const r = this.snapshots.resolve(subject, e, u);
    if (r === null) return;
    u = { pods: r.pods };
    switch (r.op) {
      case "REMOVE":
        for (const p of u.pods) this.mgr.removePod(p.metadata.uid);
        break;
      case "SET": {
        const part = bus.partitionOf(subject);
        if (part < 0) {
          this.log.error("SET on a subject without a partition", { subject });
          return;
        }
        this.mgr.syncSource(e.source, (uid) => bus.partition(uid, this.cfg.partitions) === part, u.pods);
        break;
      }
      default:
        for (const p of u.pods) this.mgr.upsertPod(e.source, p);
    }
  }

  onStatus(subject, e) {
    let st;
    try {
      st = bus.decodePodRuntimeStatus(e);
    } catch (err) {
      this.log.error("dropping bad pod status", { subject, error: err.message });
      return;
    }
    this.mgr.updateStatus(st);
  }

  // exec runs an exec probe's command through the pod worker replica that
  // owns the pod's partition (runtime.probeexec.<p>, which runs the pod's own
  // probe commands only).
  async exec(w, cmd, timeoutMs) {
    const pod = w.entry.pod;
    const p = bus.partition(w.uid, this.cfg.partitions);
    let env;
    try {
      env = await this.pub.request(this.subjects.probeExec(p), "ExecRequest", {
        podUID: w.uid, namespace: pod.metadata.namespace, pod: pod.metadata.name, container: w.container.name,
        command: cmd, timeoutSeconds: Math.floor(timeoutMs / 1000),
      }, timeoutMs + this.cfg.execGraceMs);
    } catch (err) {
      if (err.code === "503") return { outcome: "Unknown", message: `no pod worker answers for partition ${p}`, counted: false };
      if (err.code === "TIMEOUT") {
        // kubelet rule: a timed-out exec probe is a failure, not an error.
        return { outcome: "Failure", message: `command ${goQuote(cmd)} timed out after ${goDuration(timeoutMs)}`, counted: true };
      }
      return { outcome: "Unknown", message: err.message, counted: false };
    }
    let res;
    try {
      res = bus.decodeExecResult(env);
    } catch (err) {
      return { outcome: "Unknown", message: `bad exec answer: ${err.message}`, counted: false };
    }
    if (res.error) return { outcome: "Failure", message: String(res.error), counted: true };
    const out = Buffer.concat([Buffer.from(res.stdout ?? "", "base64"), Buffer.from(res.stderr ?? "", "base64")])
      .subarray(0, MAX_OUTPUT).toString();
    return { outcome: res.exitCode ? "Failure" : "Success", message: out, counted: true };
  }

  // put queues a result; results of one (pod, container, probe) not sent
  // yet are coalesced to the newest (the bus carries state).
  put(r) {
    const k = `${r.podUID}\u0000${r.container}\u0000${r.probe}`;
    this.pending.delete(k);
    this.pending.set(k, r);
    this.wake?.();
  }

  async runOutbox() {
    while (!this.stopping || this.pending.size > 0) {
      if (this.pending.size === 0) {
        await new Promise((r) => (this.wake = r));
        this.wake = null;
        continue;
      }
      if (!(await this.flushOnce()) && !this.stopping) await new Promise((r) => setTimeout(r, 1000));
      if (this.stopping && Date.now() > this.drainUntil) return;
    }
  }

  // flushOnce sends what is queued, in order, and waits for the stream's
  // acknowledgements; a result that failed goes back unless a newer one came.
  async flushOnce() {
    const batch = [...this.pending.entries()];
    this.pending.clear();
    const sent = batch.map(([k, r]) => {
      const subject = this.results.probes(bus.partition(r.podUID, this.cfg.partitions));
      return { k, r, subject, ack: this.pub.publish(subject, "ProbeResult", r) };
    });
    let ok = true;
    for (const s of sent) {
      try {
        await s.ack;
        this.log.info("probe result changed", { ...podFields({ metadata: { namespace: s.r.namespace, name: s.r.name, uid: s.r.podUID } }),
          node: this.node, subject: s.subject, container: s.r.container, probe: s.r.probe, result: s.r.result, message: s.r.message });
      } catch (err) {
        ok = false;
        this.log.warn("probe result not stored, will retry", { pod: `${s.r.namespace}/${s.r.name}`, uid: s.r.podUID, subject: s.subject, error: err.message });
        if (!this.pending.has(s.k)) this.pending = new Map([[s.k, s.r], ...this.pending]);
      }
    }
    return ok;
  }

  // lags reads the durable consumers' pending and unacknowledged counts.
  async lags() {
    return Promise.all(this.consumers.map(async (c) => {
      try {
        const info = await this.jsm.consumers.info(c.stream, c.durable);
        return { stream: c.stream, durable: c.durable, pending: info.num_pending, ackPending: info.num_ack_pending };
      } catch (err) {
        return { stream: c.stream, durable: c.durable, pending: 0, ackPending: 0, error: err.message };
      }
    }));
  }

  // stop ends the consumers (the message in hand is finished), then every
  // worker, then sends the results still queued for at most drainMs.
  async stop(drainMs) {
    this.stopping = true;
    await this.subscribing;
    await Promise.all(this.consumers.map((c) => c.stop()));
    await this.mgr.stop();
    this.drainUntil = Date.now() + drainMs;
    this.wake?.();
    await this.outbox;
  }
}
