#!/usr/bin/env node
// jsprober: a Splitlet prober stage in JavaScript. It takes the place of
// services/prober on the bus (docs/bus.md): the same durable consumers, the
// same ProbeResult messages, exec probes through runtime.probeexec.<p>.
//
//   node prober.js --nats-url=nats://127.0.0.1:4222 --node-name=splitlet-node
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { connect, credsAuthenticator, nkeyAuthenticator } from "nats";
import * as config from "./lib/config.js";
import { newLogger, redactURL } from "./lib/log.js";
import { Stage } from "./lib/stage.js";
import { shadowIdentity } from "./lib/bus.js";
import * as discovery from "./lib/discovery.js";

const VERSION = process.env.SPLITLET_VERSION_OVERRIDE || "v0.1.0-dev";
const BINARY = "jsprober";

// natsOptions: servers, credentials from the URL (user:password@ or
// token@), and the identity and TLS files, as the Go stages take them
// (libs/messaging.AuthOptions).
export function natsOptions(cfg) {
  const servers = [];
  // the prober's bus identity may subscribe to its own inboxes alone
  // (docs/bus.md, Identities and permissions).
  // (a shadow's: _INBOX.shadow-prober).
  const opts = { name: `${BINARY} ${cfg.nodeName}`, inboxPrefix: `_INBOX.${cfg.shadow ? shadowIdentity("prober") : "prober"}` };
  const authenticators = [];
  for (const raw of cfg.natsURL.split(",").map((s) => s.trim()).filter(Boolean)) {
    const u = new URL(raw.includes("://") ? raw : `nats://${raw}`);
    if (u.protocol === "tls:") opts.tls = opts.tls ?? {};
    if (u.username && u.password) {
      opts.user = decodeURIComponent(u.username);
      opts.pass = decodeURIComponent(u.password);
    } else if (u.username) {
      opts.token = decodeURIComponent(u.username);
    }
    servers.push(`${u.hostname.includes(":") ? `[${u.hostname}]` : u.hostname}:${u.port || 4222}`);
  }
  if (servers.length === 0) throw new Error("nats-url: no server");
  opts.servers = servers;
  if (cfg.natsNkey) {
    let seed;
    try {
      seed = fs.readFileSync(cfg.natsNkey, "utf8").split("\n").map((l) => l.trim()).find((l) => l.startsWith("SU"));
    } catch (err) {
      throw new Error(`nats-nkey ${cfg.natsNkey}: ${err.message}`);
    }
    if (!seed) throw new Error(`nats-nkey ${cfg.natsNkey}: no user nkey seed in the file`);
    authenticators.push(nkeyAuthenticator(new TextEncoder().encode(seed)));
  }
  if (cfg.natsCreds) {
    try {
      authenticators.push(credsAuthenticator(fs.readFileSync(cfg.natsCreds)));
    } catch (err) {
      throw new Error(`nats-creds: ${err.message}`);
    }
  }
  if (authenticators.length) opts.authenticator = authenticators;
  for (const [key, file] of [["nats-tls-ca", cfg.natsTLSCA], ["nats-tls-cert", cfg.natsTLSCert], ["nats-tls-key", cfg.natsTLSKey]]) {
    if (file && !fs.existsSync(file)) throw new Error(`${key}: ${file}: no such file`);
  }
  if (cfg.natsTLSCA || cfg.natsTLSCert) {
    opts.tls = { ...(opts.tls ?? {}) };
    if (cfg.natsTLSCA) opts.tls.caFile = cfg.natsTLSCA;
    if (cfg.natsTLSCert) Object.assign(opts.tls, { certFile: cfg.natsTLSCert, keyFile: cfg.natsTLSKey });
  }
  return opts;
}

const httpAddrFile = (cfg) => path.join(cfg.dataDir, `${BINARY}.http-addr`);

function splitHostPort(addr) {
  const i = addr.lastIndexOf(":");
  return { host: addr.slice(0, i).replace(/^\[|\]$/g, "") || "0.0.0.0", port: Number(addr.slice(i + 1)) };
}

// healthcheck is --healthcheck: GET /readyz of the running process.
async function healthcheck(cfg) {
  let addr = cfg.httpAddr;
  if (splitHostPort(addr).port === 0) {
    try {
      addr = fs.readFileSync(httpAddrFile(cfg), "utf8").trim();
    } catch (err) {
      throw new Error(`no running ${BINARY} found: ${err.message}`);
    }
  }
  const res = await fetch(`http://${addr}/readyz`, { signal: AbortSignal.timeout(2000) });
  const body = await res.text();
  if (res.status !== 200) throw new Error(`/readyz at ${addr}: ${res.status} ${res.statusText}\n${body}`);
}

// serveHealth serves /healthz and /readyz at http-addr and writes the bound
// address to <data-dir>/jsprober.http-addr.
async function serveHealth(cfg, conn, stage, log) {
  const srv = http.createServer((req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    if (path === "/healthz") return res.end("ok\n");
    if (path === "/readyz") {
      const problems = [];
      if (!conn.connected) problems.push("nats: not connected");
      if (!stage.ready) problems.push(stage.lastError);
      res.statusCode = problems.length ? 503 : 200;
      return res.end(problems.length ? problems.join("\n") + "\n" : "ok\n");
    }
    res.statusCode = 404;
    res.end("404 page not found\n");
  });
  const { host, port } = splitHostPort(cfg.httpAddr);
  await new Promise((resolve, reject) => srv.once("error", reject).listen(port, host, resolve));
  const a = srv.address();
  const bound = `${a.address.includes(":") ? `[${a.address}]` : a.address}:${a.port}`;
  fs.mkdirSync(cfg.dataDir, { recursive: true });
  fs.writeFileSync(httpAddrFile(cfg), bound + "\n");
  log.info("health server listening", { addr: bound });
  return srv;
}

async function main() {
  let cfg;
  try {
    cfg = config.load(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`${BINARY}: ${err.message}\n\n${config.usage()}`);
    return 2;
  }
  if (cfg.flags.help) {
    process.stdout.write(config.usage());
    return 0;
  }
  if (cfg.flags.healthcheck) {
    try {
      await healthcheck(cfg);
      return 0;
    } catch (err) {
      process.stderr.write(`${BINARY}: healthcheck: ${err.message}\n`);
      return 1;
    }
  }
  const log = newLogger(cfg.logLevel, cfg.logFormat, { logger: BINARY, node: cfg.nodeName });
  let opts;
  try {
    opts = natsOptions(cfg);
  } catch (err) {
    log.error("cannot connect to NATS", { error: err.message });
    return 1;
  }
  log.info("starting", { version: VERSION, natsURL: cfg.natsURL.split(",").map(redactURL).join(","), partitions: cfg.partitions, instance: cfg.instance });
  const nc = await connect({
    ...opts,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    waitOnFirstConnect: true,
  });
  log.info("nats connected", { server: nc.getServer() });
  const conn = { connected: true };
  (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect") {
        conn.connected = false;
        log.warn("nats disconnected", { server: String(s.data) });
      } else if (s.type === "reconnect") {
        conn.connected = true;
        log.info("nats reconnected", { server: String(s.data) });
      }
      else if (s.type === "error") log.warn("nats error", { error: String(s.data) });
    }
  })().catch(() => {});
  const js = nc.jetstream();
  const jsm = await nc.jetstreamManager({ checkAPI: false });
  const stage = new Stage({ nc, js, jsm, cfg, log });
  stage.start();
  const health = await serveHealth(cfg, conn, stage, log);
  let svc;
  try {
    const name = cfg.shadow ? shadowIdentity("prober") : "prober";
    svc = await discovery.serve(nc, { node: cfg.nodeName, version: VERSION, stage, subject: stage.subjects.status(name), name });
  } catch (err) {
    log.warn("not on the NATS service API", { error: err.message });
  }

  const signal = await new Promise((resolve) => {
    process.once("SIGTERM", () => resolve("SIGTERM"));
    process.once("SIGINT", () => resolve("SIGINT"));
  });
  log.info("shutting down", { signal });
  const hard = setTimeout(() => {
    log.error("shutdown took longer than shutdown-timeout; exiting");
    process.exit(1);
  }, cfg.shutdownTimeoutMs);
  for (const s of ["SIGTERM", "SIGINT"]) process.once(s, () => process.exit(1));
  health.close();
  await svc?.stop().catch(() => {});
  await stage.stop(Math.min(5000, cfg.shutdownTimeoutMs / 2));
  await nc.drain().catch(() => {});
  clearTimeout(hard);
  log.info("stopped");
  return 0;
}

main().then((code) => process.exit(code), (err) => {
  process.stderr.write(`${BINARY}: ${err?.stack ?? err}\n`);
  process.exit(1);
});
