// One run of a probe action against its target, as the kubelet's probe
// handlers judge it. Each returns { result, message } with result one of
// "success", "warning", "failure", or throws when the probe cannot be built.
import net from "node:net";
import http from "node:http";
import https from "node:https";
import http2 from "node:http2";

// The Kubernetes minor release Splitlet stands in for (services/prober).
export const USER_AGENT = "kube-probe/1.36";
const MAX_OUTPUT = 10 << 10;

// resolvePort turns a probe's port (a number, or the name of one of the
// container's ports) into a number.
export function resolvePort(port, container) {
  let n;
  if (typeof port === "number") {
    n = port;
  } else if (typeof port === "string") {
    const named = (container.ports ?? []).find((p) => p.name === port);
    if (named) {
      n = named.containerPort;
    } else if (/^-?[0-9]+$/.test(port)) {
      n = Number(port); // kubelet rule: a name that matches no port may be a number
    } else {
      throw new Error(`port ${JSON.stringify(port)} not found in container ${JSON.stringify(container.name)}`);
    }
  } else {
    throw new Error(`port has no type: ${JSON.stringify(port)}`);
  }
  if (!Number.isInteger(n) || n < 1 || n > 65535) throw new Error(`invalid port number: ${n}`);
  return n;
}

const joinHostPort = (host, port) => (host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`);

// goSeconds prints a whole-second duration as Go does (1s, 1m0s).
export function goDuration(ms) {
  const s = Math.round(ms / 1000);
  return s >= 60 ? `${Math.floor(s / 60)}m${s % 60}s` : `${s}s`;
}

// dialError words a connection error as Go's net package does, so the
// messages match Splitlet's own prober.
function dialError(addr, err) {
  const why = {
    ECONNREFUSED: "connect: connection refused",
    EHOSTUNREACH: "connect: no route to host",
    ENETUNREACH: "connect: network is unreachable",
    ECONNRESET: "read: connection reset by peer",
    ETIMEDOUT: "i/o timeout",
    ENOTFOUND: "no such host",
    EAI_AGAIN: "no such host",
  }[err.code] ?? err.message;
  return `dial tcp ${addr}: ${why}`;
}

// tcp opens a connection within timeoutMs and closes it again.
export function tcp(host, port, timeoutMs, signal) {
  const addr = joinHostPort(host, port);
  return new Promise((resolve) => {
    const sock = net.connect({ host, port });
    const finish = (r) => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      sock.destroy();
      resolve(r);
    };
    const onAbort = () => finish({ result: "failure", message: `dial tcp ${addr}: operation was canceled` });
    const timer = setTimeout(() => finish({ result: "failure", message: `dial tcp ${addr}: i/o timeout` }), timeoutMs);
    signal?.addEventListener("abort", onAbort);
    sock.once("connect", () => finish({ result: "success", message: "" }));
    sock.once("error", (err) => finish({ result: "failure", message: dialError(addr, err) }));
  });
}

// httpRequest builds the GET of an httpGet action: scheme (default http),
// host (default the pod IP), port, path and headers, with the kubelet's
// User-Agent and Accept unless the action sets them.
export function httpRequest(action, container, podIP) {
  const scheme = (action.scheme || "HTTP").toLowerCase();
  const host = action.host || podIP;
  const port = resolvePort(action.port, container);
  let path = action.path || "";
  if (!path.startsWith("/")) path = "/" + path;
  const url = new URL(`${scheme}://${joinHostPort(host, port)}${path}`);
  const headers = {};
  for (const h of action.httpHeaders ?? []) {
    const k = h.name.toLowerCase();
    headers[k] = headers[k] === undefined ? h.value : [].concat(headers[k], h.value);
  }
  if (headers["user-agent"] === undefined) headers["user-agent"] = USER_AGENT;
  // kubelet rule: an Accept header given empty removes the default.
  if (headers.accept === undefined) headers.accept = "*/*";
  else if (headers.accept === "") delete headers.accept;
  return { url, headers };
}

function getOnce(url, headers, deadline, signal) {
  return new Promise((resolve, reject) => {
    const mod = url.protocol === "https:" ? https : http;
    const req = mod.request(url, {
      method: "GET", headers, agent: false, rejectUnauthorized: false, // kubelet rule: probes skip verification
      timeout: Math.max(deadline - Date.now(), 1), signal,
    }, (res) => {
      const chunks = [];
      let size = 0;
      res.on("data", (c) => {
        if (size < MAX_OUTPUT) chunks.push(c);
        size += c.length;
      });
      res.on("end", () => resolve({ status: res.statusCode, location: res.headers.location, body: Buffer.concat(chunks).subarray(0, MAX_OUTPUT).toString() }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(Object.assign(new Error("timeout"), { code: "PROBE_TIMEOUT" })));
    req.on("error", reject);
    req.end();
  });
}

// httpGet sends the request and judges the answer: 200 to 399 is healthy.
// Redirects to the same host are followed (at most 10); one to another host
// is not, and counts as healthy with a warning (kubelet rule).
export async function httpGet({ url, headers }, timeoutMs, signal) {
  const deadline = Date.now() + timeoutMs;
  let target = url;
  for (let hops = 0; ; hops++) {
    let res;
    try {
      res = await getOnce(target, headers, deadline, signal);
    } catch (err) {
      const addr = `${target.hostname}:${target.port}`;
      const why = err.code === "PROBE_TIMEOUT"
        ? "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        : err.code === "ECONNREFUSED" || err.code === "EHOSTUNREACH" || err.code === "ENETUNREACH" ? dialError(addr, err) : err.message;
      return { result: "failure", message: `Get ${JSON.stringify(target.href)}: ${why}` };
    }
    if ([301, 302, 303, 307, 308].includes(res.status) && res.location) {
      const next = new URL(res.location, target);
      if (next.hostname === url.hostname) {
        if (hops >= 9) return { result: "failure", message: `Get ${JSON.stringify(next.href)}: stopped after 10 redirects` };
        target = next;
        continue;
      }
    }
    if (res.status >= 200 && res.status < 300) return { result: "success", message: res.body };
    if (res.status >= 300 && res.status < 400) return { result: "warning", message: "Probe terminated redirects, Response body: " + res.body };
    return { result: "failure", message: `HTTP probe failed with statuscode: ${res.status}` };
  }
}

// The gRPC health states (grpc.health.v1.HealthCheckResponse.ServingStatus).
const SERVING_STATUS = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"];

// grpc calls grpc.health.v1.Health/Check on host:port for service over
// plain-text HTTP/2; SERVING is healthy, anything else a failure.
export function grpc(host, port, service, timeoutMs, signal) {
  const addr = joinHostPort(host, port);
  return new Promise((resolve) => {
    let settled = false;
    const session = http2.connect(`http://${addr}`);
    const finish = (result, message) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      session.destroy();
      resolve({ result, message });
    };
    const onAbort = () => finish("failure", "error: health rpc probe failed: canceled");
    const timer = setTimeout(() => finish("failure", `timeout: health rpc did not complete within ${goDuration(timeoutMs)}`), timeoutMs);
    signal?.addEventListener("abort", onAbort);
    const unavailable = (err) => finish("failure",
      `error: health rpc probe failed: rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: ${dialError(addr, err)}"`);
    session.on("error", unavailable);
    // HealthCheckRequest{service = 1}, in a gRPC frame (no compression, length).
    const svc = Buffer.from(service ?? "");
    const body = svc.length ? Buffer.concat([Buffer.from([0x0a]), varint(svc.length), svc]) : Buffer.alloc(0);
    const frame = Buffer.alloc(5 + body.length);
    frame.writeUInt32BE(body.length, 1);
    body.copy(frame, 5);
    const req = session.request({
      ":method": "POST", ":path": "/grpc.health.v1.Health/Check",
      "content-type": "application/grpc", te: "trailers", "user-agent": USER_AGENT,
    });
    const chunks = [];
    let status;
    const verdict = (h) => {
      if (h["grpc-status"] === undefined) return false;
      const code = Number(h["grpc-status"]);
      const msg = decodeURIComponent(h["grpc-message"] ?? "");
      if (code === 12) finish("failure", "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): " + msg);
      else if (code === 4) finish("failure", `timeout: health rpc did not complete within ${goDuration(timeoutMs)}`);
      else if (code !== 0) finish("failure", `error: health rpc probe failed: rpc error: code = ${GRPC_CODES[code] ?? `Code(${code})`} desc = ${msg}`);
      else if (status === 1) finish("success", "service healthy");
      else finish("failure", `service unhealthy (responded with ${JSON.stringify(SERVING_STATUS[status ?? 0] ?? String(status))})`);
      return true;
    };
    req.on("response", (h) => { verdict(h); });
    req.on("data", (c) => chunks.push(c));
    req.on("trailers", (h) => {
      // HealthCheckResponse{status = 1 (varint)}; an absent field is 0.
      const data = Buffer.concat(chunks);
      status = data.length >= 7 && data[5] === 0x08 ? data[6] : 0;
      verdict(h);
    });
    req.on("close", () => finish("failure", "error: health rpc probe failed: rpc error: code = Internal desc = stream closed without status"));
    req.on("error", (err) => (err.cause?.code ? unavailable(err.cause) : finish("failure", `error: health rpc probe failed: ${err.message}`)));
    req.end(frame);
  });
}

const GRPC_CODES = ["OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound", "AlreadyExists",
  "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented", "Internal",
  "Unavailable", "DataLoss", "Unauthenticated"];

function varint(n) {
  const out = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return Buffer.from(out);
}

// expandCommand replaces $(NAME) with the value of the container's env var
// NAME when it has a literal value; $$ is a literal $; an unknown name stays
// as written (kubelet: ExpandContainerCommandOnlyStatic).
export function expandCommand(cmd, env) {
  const vars = new Map();
  for (const e of env ?? []) if (!e.valueFrom) vars.set(e.name, e.value ?? "");
  if (vars.size === 0) return cmd;
  return cmd.map((s) => {
    let out = "";
    for (let i = 0; i < s.length; i++) {
      if (s[i] !== "$" || i + 1 === s.length) {
        out += s[i];
      } else if (s[i + 1] === "$") {
        out += "$";
        i++;
      } else if (s[i + 1] === "(") {
        const end = s.indexOf(")", i + 2);
        if (end < 0) return out + s.slice(i);
        const name = s.slice(i + 2, end);
        out += name !== "" && vars.has(name) ? vars.get(name) : s.slice(i, end + 1);
        i = end;
      } else {
        out += "$";
      }
    }
    return out;
  });
}

// goQuote prints a command as Go's %q prints a []string.
export const goQuote = (cmd) => `[${cmd.map((a) => JSON.stringify(a)).join(" ")}]`;
