// The Splitlet bus contract, v1 (docs/bus.md), as far as a prober needs it:
// subjects, partitions, the envelope, stream settings, a publisher and a
// durable consumer loop.
import { AckPolicy, DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType, nanos } from "nats";

export const SCHEMA_VERSION = 1;
export const KINDS = new Set([
  "PodUpdate", "PodRuntimeStatus", "ProbeResult", "SourcesReady", "AgentReadiness",
  "LogsRequest", "LogsChunk", "ExecRequest", "ExecResult", "StatsRequest", "StatsResult",
  "StreamRequest", "StreamResult",
]);
export const OPS = new Set(["SET", "ADD", "UPDATE", "DELETE", "REMOVE", "RECONCILE", "SETPART"]);

export const nodeToken = (node) => node.replaceAll(".", "_");

// subjects(node).podUpdates(3) → splitlet.v1.<node>.podupdates.3
export function subjects(node) {
  return subjectsUnder(`splitlet.v1.${nodeToken(node)}`);
}

// Shadow mode (docs/bus.md, "Shadow stages"): a shadow of a stage
// publishes under splitlet.v1.<node>.shadow.<stage>, consumes with durables
// shadow-<durable>, and connects as the identity shadow-<stage>.
export const shadowIdentity = (stage) => `shadow-${stage}`;
export const shadowDurable = (durable) => `shadow-${durable}`;

function subjectsUnder(prefix) {
  return {
    prefix,
    // shadow(stage).probes(3) → splitlet.v1.<node>.shadow.<stage>.probes.3
    shadow: (stage) => subjectsUnder(`${prefix}.shadow.${stage}`),
    shadowAll: `${prefix}.shadow.>`,
    podUpdates: (p) => `${prefix}.podupdates.${p}`,
    // podupdates.* leaves out the reconciles, sent on
    // podupdates.reconcile.<p> (for the pod workers alone).
    podUpdatesAll: `${prefix}.podupdates.*`,
    // the pod-updates stream holds both: podupdates.>.
    podUpdatesStream: `${prefix}.podupdates.>`,
    podStatus: (p) => `${prefix}.podstatus.${p}`,
    podStatusAll: `${prefix}.podstatus.*`,
    probes: (p) => `${prefix}.probes.${p}`,
    probesAll: `${prefix}.probes.*`,
    stateAll: `${prefix}.state.>`,
    // the prober's exec probes: the pod worker runs only the pod's own probe commands.
    probeExec: (p) => `${prefix}.runtime.probeexec.${p}`,
    status: (stage) => `${prefix}.status.${stage}`,
  };
}

export const streamName = (node, what) => `splitlet_v1_${nodeToken(node)}_${what}`;

// FNV-1a 32-bit of the UID's bytes, modulo the partition count.
export function partition(uid, partitions) {
  if (partitions <= 1) return 0;
  let h = 2166136261;
  for (const b of Buffer.from(uid, "utf8")) {
    h = Math.imul(h ^ b, 16777619) >>> 0;
  }
  return h % partitions;
}

// The partition of a partitioned subject (its last token), or -1.
export function partitionOf(subject) {
  const last = subject.slice(subject.lastIndexOf(".") + 1);
  return /^[0-9]{1,4}$/.test(last) ? Number(last) : -1;
}

export class DecodeError extends Error {
  constructor(field, reason) {
    super(`bus: field ${field}: ${reason}`);
    this.field = field;
  }
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const isString = (v) => typeof v === "string";

// decode parses and checks an envelope; it throws a DecodeError naming the field.
export function decode(data) {
  const text = Buffer.from(data).toString("utf8");
  if (text.trim() === "") throw new DecodeError("(message)", "empty");
  let e;
  try {
    e = JSON.parse(text);
  } catch (err) {
    throw new DecodeError("(message)", `malformed JSON: ${err.message}`);
  }
  if (!isObject(e)) throw new DecodeError("(root)", "cannot hold a JSON " + typeof e);
  if (e.schemaVersion !== SCHEMA_VERSION) throw new DecodeError("schemaVersion", `is ${e.schemaVersion}, want ${SCHEMA_VERSION}`);
  if (!KINDS.has(e.kind)) throw new DecodeError("kind", `unknown kind ${JSON.stringify(e.kind)}`);
  if (!isString(e.node) || e.node === "") throw new DecodeError("node", "required");
  if (!isString(e.source) || e.source === "") throw new DecodeError("source", "required");
  if (e.kind === "PodUpdate" && !OPS.has(e.op)) throw new DecodeError("op", `unknown PodUpdate op ${JSON.stringify(e.op)}`);
  if (e.kind !== "PodUpdate" && e.op !== undefined && e.op !== "") throw new DecodeError("op", `only PodUpdate messages carry an op, ${e.kind} has ${JSON.stringify(e.op)}`);
  if (!Number.isInteger(e.seq) || e.seq <= 0) throw new DecodeError("seq", "required (starts at 1)");
  if (!isString(e.sentAt) || Number.isNaN(Date.parse(e.sentAt))) throw new DecodeError("sentAt", "required");
  if (!isObject(e.payload)) throw new DecodeError("payload", "must be a JSON object");
  return e;
}

function want(e, kind) {
  if (e.kind !== kind) throw new DecodeError("kind", `is ${e.kind}, want ${kind}`);
}

function optString(obj, key, field) {
  if (obj[key] !== undefined && obj[key] !== null && !isString(obj[key])) throw new DecodeError(field, "cannot hold a JSON " + typeof obj[key]);
}

function optArray(obj, key, field) {
  const v = obj[key];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new DecodeError(field, "cannot hold a JSON " + typeof v);
  return v;
}

// The parts of a pod the prober reads, checked for shape.
function checkPod(pod, at) {
  if (!isObject(pod)) throw new DecodeError(at, "cannot hold a JSON " + typeof pod);
  const m = pod.metadata;
  if (!isObject(m)) throw new DecodeError(`${at}.metadata.uid`, "required");
  for (const k of ["uid", "name", "namespace"]) {
    optString(m, k, `${at}.metadata.${k}`);
    if (!m[k]) throw new DecodeError(`${at}.metadata.${k}`, "required");
  }
  const spec = pod.spec ?? {};
  if (!isObject(spec)) throw new DecodeError(`${at}.spec`, "cannot hold a JSON " + typeof spec);
  for (const list of ["containers", "initContainers"]) {
    optArray(spec, list, `${at}.spec.${list}`).forEach((c, i) => {
      if (!isObject(c) || !isString(c.name)) throw new DecodeError(`${at}.spec.${list}[${i}].name`, "required");
    });
  }
}

export function decodePodUpdate(e) {
  want(e, "PodUpdate");
  const pods = optArray(e.payload, "pods", "payload.pods");
  if (pods.length === 0 && e.op !== "SET") throw new DecodeError("payload.pods", "empty, only a SET may be empty");
  pods.forEach((p, i) => checkPod(p, `payload.pods[${i}]`));
  if (e.op !== "SETPART") return { pods };
  const s = e.payload.snapshot;
  if (!isObject(s)) throw new DecodeError("payload.snapshot", "required on a SETPART");
  if (!isString(s.id) || s.id === "") throw new DecodeError("payload.snapshot.id", "required");
  if (!Number.isInteger(s.part) || !Number.isInteger(s.parts) || s.parts < 2 || s.part < 1 || s.part > s.parts) {
    throw new DecodeError("payload.snapshot.part", `${s.part} of ${s.parts}: must be 1 to parts, parts at least 2`);
  }
  return { pods, snapshot: s };
}

// Snapshots puts the parts of a SET sent as SETPARTs back together, per
// subject and source (docs/bus.md, "PodUpdate operations"): resolve returns
// the operation and pods to apply, or null while parts are still to come.
// Parts come in order; a snapshot missing one is dropped.
export class Snapshots {
  constructor() {
    this.pending = new Map();
  }

  resolve(subject, e, u) {
    if (e.op !== "SETPART") return { op: e.op, pods: u.pods };
    const key = `${subject} ${e.source}`;
    const s = u.snapshot;
    if (s.part === 1) this.pending.set(key, { id: s.id, next: 1, pods: [] });
    const p = this.pending.get(key);
    if (!p || p.id !== s.id || p.next !== s.part) {
      this.pending.delete(key);
      return null;
    }
    p.pods.push(...u.pods);
    p.next++;
    if (s.part < s.parts) return null;
    this.pending.delete(key);
    return { op: "SET", pods: p.pods };
  }
}

export function decodePodRuntimeStatus(e) {
  want(e, "PodRuntimeStatus");
  const p = e.payload;
  for (const k of ["uid", "name", "namespace", "podIP", "phase"]) optString(p, k, `payload.${k}`);
  if (!p.uid) throw new DecodeError("payload.uid", "required");
  if (!p.name) throw new DecodeError("payload.name", "required");
  if (!p.namespace) throw new DecodeError("payload.namespace", "required");
  for (const list of ["containerStatuses", "initContainerStatuses"]) {
    optArray(p, list, `payload.${list}`).forEach((c, i) => {
      if (!isObject(c) || !isString(c.name) || c.name === "") throw new DecodeError(`payload.${list}[${i}].name`, "required");
    });
  }
  return p;
}

export function decodeExecResult(e) {
  want(e, "ExecResult");
  return e.payload;
}

// Publisher stamps messages of one source: seq starts at the Unix time in
// microseconds and counts up by one, so it keeps increasing across restarts.
export class Publisher {
  constructor(nc, js, node, source) {
    Object.assign(this, { nc, js, node, source });
    this.seq = Date.now() * 1000;
  }

  seal(kind, payload, op) {
    const e = { schemaVersion: SCHEMA_VERSION, kind, node: this.node, source: this.source };
    if (op) e.op = op;
    e.seq = ++this.seq;
    e.sentAt = new Date().toISOString();
    e.payload = payload;
    return { data: JSON.stringify(e), seq: e.seq };
  }

  // publish sends to a stream subject with the message ID <source>-<seq> and
  // returns the promise of the stream's acknowledgement. The message leaves
  // in call order, so messages of this source stay in seq order.
  publish(subject, kind, payload) {
    const { data, seq } = this.seal(kind, payload);
    return this.js.publish(subject, data, { msgID: `${this.source}-${seq}` });
  }

  // request sends a plain NATS request and decodes the one answer.
  async request(subject, kind, payload, timeoutMs) {
    const { data } = this.seal(kind, payload);
    const m = await this.nc.request(subject, data, { timeout: timeoutMs });
    return decode(m.data);
  }
}

const HOUR_MS = 3600 * 1000;

// streamConfigs are the node's streams as the contract sets them.
export function streamConfigs(node, replicas) {
  const s = subjects(node);
  const history = (what, subject) => ({
    name: streamName(node, what),
    description: `Splitlet v1 ${what} of node ${node}`,
    subjects: [subject],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: nanos(HOUR_MS),
    discard: DiscardPolicy.Old,
    duplicate_window: nanos(2 * 60 * 1000),
    num_replicas: Math.max(replicas, 1),
  });
  const state = { ...history("state", s.stateAll), max_msgs_per_subject: 1, max_age: 0 };
  return [history("podupdates", s.podUpdatesStream), history("podstatus", s.podStatusAll), history("probes", s.probesAll), state];
}

// shadowStreamConfig is the stream of the node's shadow outputs
// (splitlet_v1_<node>_shadow, subjects splitlet.v1.<node>.shadow.>).
export function shadowStreamConfig(node, replicas) {
  return {
    name: streamName(node, "shadow"),
    description: `Splitlet v1 shadow stages' outputs of node ${node}`,
    subjects: [subjects(node).shadowAll],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: nanos(HOUR_MS),
    max_bytes: 256 * 1024 * 1024,
    discard: DiscardPolicy.Old,
    duplicate_window: nanos(2 * 60 * 1000),
    num_replicas: Math.max(replicas, 1),
  };
}

const unlimited = (v) => (!v || v <= 0 ? -1 : v);

function conforms(have, want) {
  return JSON.stringify(have.subjects) === JSON.stringify(want.subjects) && have.retention === want.retention &&
    have.storage === want.storage && have.max_age === want.max_age && have.discard === want.discard &&
    have.duplicate_window === want.duplicate_window && have.num_replicas === want.num_replicas &&
    unlimited(have.max_msgs_per_subject) === unlimited(want.max_msgs_per_subject);
}

export const isNotFound = (err) => err?.api_error?.err_code === 10059 || err?.api_error?.err_code === 10014 ||
  err?.code === "404" || /not found/i.test(err?.message ?? "");

// ensureStreams creates the node's streams or brings them to the contract's
// settings; a stream that already conforms is left alone (an identity that
// may only read streams gets through). replicas 0 keeps an existing count.
export async function ensureStreams(jsm, node, replicas, { shadow = false } = {}) {
  const configs = streamConfigs(node, replicas);
  if (shadow) configs.push(shadowStreamConfig(node, replicas));
  for (const cfg of configs) {
    let have;
    try {
      have = (await jsm.streams.info(cfg.name)).config;
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    if (have) {
      if (replicas < 1) cfg.num_replicas = have.num_replicas;
      if (conforms(have, cfg)) continue;
      await jsm.streams.update(cfg.name, cfg);
    } else {
      await jsm.streams.add(cfg);
    }
  }
}

// A handler that throws (docs/bus.md, "Failed messages"): its message comes
// back after RETRY_DELAY_MS, twice as long each time up to
// MAX_RETRY_DELAY_MS, and is terminated at its MAX_DELIVERIES-th delivery;
// the server stops at twice as many (max_deliver), a backstop for a stage
// that dies on a message. What a terminated message carried is recovered
// from the next SET or, every RECOVER_EVERY_MS, from the stream.
export const MAX_DELIVERIES = 5;
export const RETRY_DELAY_MS = 1000;
export const MAX_RETRY_DELAY_MS = 30_000;
export const RECOVER_EVERY_MS = 30_000;

const backoff = (delivered) => Math.min(RETRY_DELAY_MS * 2 ** Math.max(delivered - 1, 0), MAX_RETRY_DELAY_MS);

// markKey says what a message is about, as far as a newer one supersedes
// it, and whether it is recovered from the stream (redo) rather than by the
// next SET of its source and partition.
function markKey(subject, e) {
  const p = e.payload;
  if (e.kind === "PodUpdate" && partitionOf(subject) >= 0) return { key: `PodUpdate ${e.source} ${partitionOf(subject)}`, redo: false };
  if (e.kind === "PodRuntimeStatus" && isString(p.uid)) return { key: `PodRuntimeStatus ${p.uid}`, redo: true };
  if (e.kind === "ProbeResult" && isString(p.podUID)) return { key: `ProbeResult ${p.podUID} ${p.container} ${p.probe}`, redo: true };
  return { key: `subject ${subject}`, redo: true };
}

// settles: the mark a message the handler took supersedes (a pod update's
// only when it is a whole snapshot: a SET, or the last part of one).
function settles(subject, e) {
  if (e.kind === "PodUpdate" && !(e.op === "SET" || (e.op === "SETPART" && e.payload.snapshot?.part === e.payload.snapshot?.parts))) return null;
  return markKey(subject, e).key;
}

function decodeMsg(header, data) {
  const ct = header?.get("Content-Type") ?? "";
  if (ct !== "" && ct !== "application/json") {
    // the protobuf form: this prober reads JSON only, and the
    // stages it reads from must run with bus-encoding json.
    throw new DecodeError("(header Content-Type)", `${ct}: this stage reads JSON only; run the other stages with bus-encoding json`);
  }
  return decode(data);
}

// consume runs handler(subject, envelope) on each message of a durable
// consumer, one at a time, in stream order. A message that does not decode
// is logged and terminated; one whose seq is not above the last accepted
// from its source on its subject is acknowledged unhandled; a handler that
// throws has its message delivered again, a bounded number of times, then
// terminated and recovered (above). Returns the consumer's stop function.
export async function consume(js, jsm, { stream, durable, filter, log, inactiveMs = 0 }, handler) {
  await jsm.consumers.add(stream, {
    ...(inactiveMs > 0 ? { inactive_threshold: nanos(inactiveMs) } : {}),
    durable_name: durable,
    filter_subject: filter,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(30_000),
    max_ack_pending: 1000,
    max_deliver: 2 * MAX_DELIVERIES,
  });
  const consumer = await js.consumers.get(stream, durable);
  const messages = await consumer.consume({ max_messages: 256 });
  const last = new Map();
  const marks = new Map();
  let busy = Promise.resolve();
  // one handler call at a time, the consumer's or the recovery's
  const serial = (f) => (busy = busy.then(f, f));
  const done = (async () => {
    for await (const m of messages) {
      await serial(() => take(m));
    }
  })();
  async function take(m) {
    let e;
    try {
      e = decodeMsg(m.headers, m.data);
    } catch (err) {
      log.error("dropping malformed message", { subject: m.subject, error: err.message });
      m.term();
      return;
    }
    const key = `${m.subject}\u0000${e.source}`;
    const prev = last.get(key) ?? 0;
    if (e.seq <= prev) {
      m.ack();
      return;
    }
    last.set(key, e.seq);
    try {
      await handler(m.subject, e);
      const settled = marks.size > 0 ? settles(m.subject, e) : null;
      if (settled !== null && marks.delete(settled)) log.info("a newer message settled a terminated one", { subject: m.subject, seq: e.seq });
      m.ack();
    } catch (err) {
      last.set(key, prev);
      const delivered = m.info.redeliveryCount;
      const fields = { subject: m.subject, streamSeq: m.seq, consumer: durable, source: e.source, seq: e.seq, delivered, error: String(err?.stack ?? err) };
      if (delivered >= MAX_DELIVERIES) {
        log.error("message handler failed on every delivery; terminating the message", fields);
        const { key: mk, redo } = markKey(m.subject, e);
        marks.set(mk, { seq: m.seq, redo });
        m.term(`handler failed ${delivered} times`);
      } else {
        log.error("message handler failed; will retry", fields);
        m.nak(backoff(delivered));
      }
    }
  }
  // recover hands each terminated message that no snapshot settles to the
  // handler again, fetched from the stream, until it or a newer one is taken.
  async function recover() {
    for (const [mk, { seq, redo }] of [...marks]) {
      if (!redo) continue;
      let sm;
      try {
        sm = await jsm.streams.getMessage(stream, { seq });
      } catch (err) {
        if (err?.api_error?.err_code === 10037) {
          marks.delete(mk);
          log.warn("a terminated message is no longer in the stream", { consumer: durable, streamSeq: seq });
        }
        continue;
      }
      await serial(async () => {
        if (marks.get(mk)?.seq !== seq) return;
        try {
          await handler(sm.subject, decodeMsg(sm.header, sm.data));
          marks.delete(mk);
          log.info("recovered a terminated message", { consumer: durable, subject: sm.subject, streamSeq: seq });
        } catch {
          // still failing: tried again next time
        }
      });
    }
  }
  const timer = setInterval(() => recover().catch(() => {}), RECOVER_EVERY_MS);
  return {
    stream,
    durable,
    async stop() {
      clearInterval(timer);
      messages.stop();
      await done.catch(() => {});
    },
  };
}
