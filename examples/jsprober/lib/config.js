// Flags and environment variables with the keys of Splitlet's Go stages
// (libs/config): a key is a flag name (--node-name, --jsprober.instance); its
// environment variable is SPLITLET_ and the key in upper case with '-' and
// '.' as '_' (SPLITLET_NODE_NAME). A flag on the command line wins over the
// environment, which wins over the default.
import os from "node:os";
import path from "node:path";

export const envName = (key) => "SPLITLET_" + key.toUpperCase().replace(/[-.]/g, "_");

// The keys jsprober takes: the common keys that apply to a prober, and its own.
export const KEYS = [
  { key: "node-name", def: () => os.hostname().toLowerCase() || "splitlet-node", help: "name of the Node this agent runs" },
  { key: "nats-url", def: "", help: "NATS server URL(s), comma separated, credentials in the URL (user:password@ or token@); required" },
  { key: "nats-replicas", def: "1", help: "replicas of the node's streams when this stage creates them; every stage of a node must agree" },
  { key: "nats-nkey", def: "", help: "file with this stage's NATS nkey seed (its bus identity); the seed never appears on a command line" },
  { key: "nats-creds", def: "", help: "NATS credentials file (user JWT and nkey seed)" },
  { key: "nats-tls-ca", def: "", help: "CA file to verify the NATS servers' certificates (TLS to NATS)" },
  { key: "nats-tls-cert", def: "", help: "client certificate file for TLS to NATS (with nats-tls-key)" },
  { key: "nats-tls-key", def: "", help: "client key file for TLS to NATS" },
  { key: "partitions", def: "16", help: "bus partitions of the node's pods; every stage of a node must agree" },
  { key: "data-dir", def: "", help: "directory for state (the health server's address file); empty: <tmp>/splitlet/<node-name>" },
  { key: "http-addr", def: "127.0.0.1:0", help: "address of /healthz and /readyz; port 0 picks a free one" },
  { key: "log-level", def: "info", help: "debug, info, warn or error" },
  { key: "log-format", def: "json", help: "json or console" },
  { key: "shutdown-timeout", def: "10s", help: "how long shutdown may take to drain in-flight work" },
  { key: "shadow", def: "false", bool: true, help: "run as a shadow of the live prober on the live bus: consumers of its own, results under splitlet.v1.<node>.shadow.prober (docs/experiments.md)" },
  { key: "jsprober.instance", def: "jsprober", help: "the prober's name on the bus (source of its ProbeResult messages)" },
  { key: "jsprober.exec-grace", def: "2s", help: "extra wait past an exec probe's timeout for the runtime's answer" },
];

const BOOLS = ["healthcheck", "help", "version"];

export function usage() {
  const lines = ["Usage: node prober.js [--key=value ...]", "",
    "A Splitlet prober stage in JavaScript (examples/jsprober). Each key is also the environment",
    "variable SPLITLET_<KEY> (upper case, '-' and '.' as '_').", ""];
  for (const k of KEYS) {
    const def = typeof k.def === "function" ? "" : k.def;
    lines.push(`  --${k.key}${def ? ` (default ${JSON.stringify(def)})` : ""}`, `        ${k.help}`);
  }
  lines.push("  --healthcheck", "        check the /readyz of the running jsprober (at http-addr when its port is fixed, else at the address it wrote to <data-dir>/jsprober.http-addr); exit 0 when ready, 1 when not");
  lines.push("  --help", "        this text");
  return lines.join("\n") + "\n";
}

// parseDuration reads Go's durations as the Go stages take them (500ms, 2s, 1m30s).
export function parseDuration(s) {
  const re = /([0-9]*\.?[0-9]+)(ms|s|m|h)/gy;
  let total = 0;
  let m;
  let end = 0;
  while ((m = re.exec(s)) !== null) {
    total += Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2]];
    end = re.lastIndex;
  }
  if (s === "" || end !== s.length) throw new Error(`invalid duration ${JSON.stringify(s)}`);
  return total;
}

// load reads argv and env into a config; it throws with the key's name.
export function load(argv, env = process.env) {
  const given = {};
  const flags = {};
  const known = new Map(KEYS.map((k) => [k.key, k]));
  for (const arg of argv) {
    const m = /^--?([a-z0-9.-]+)(?:=(.*))?$/s.exec(arg);
    if (!m) throw new Error(`unexpected argument ${JSON.stringify(arg)}`);
    const [, key, value] = m;
    if (BOOLS.includes(key)) {
      flags[key] = value === undefined || value === "true";
      continue;
    }
    if (!known.has(key)) throw new Error(`unknown flag: --${key}`);
    if (value === undefined && known.get(key).bool) {
      given[key] = "true";
      continue;
    }
    if (value === undefined) throw new Error(`flag needs a value: --${key}=...`);
    given[key] = value;
  }
  const raw = {};
  for (const k of KEYS) {
    raw[k.key] = given[k.key] ?? env[envName(k.key)] ?? (typeof k.def === "function" ? k.def() : k.def);
  }
  const c = {
    nodeName: raw["node-name"],
    natsURL: raw["nats-url"],
    natsNkey: raw["nats-nkey"],
    natsCreds: raw["nats-creds"],
    natsTLSCA: raw["nats-tls-ca"],
    natsTLSCert: raw["nats-tls-cert"],
    natsTLSKey: raw["nats-tls-key"],
    httpAddr: raw["http-addr"],
    logLevel: raw["log-level"],
    logFormat: raw["log-format"],
    instance: raw["jsprober.instance"],
    flags,
  };
  const int = (key, lo, hi) => {
    const v = Number(raw[key]);
    if (!Number.isInteger(v) || v < lo || v > hi) throw new Error(`invalid value ${JSON.stringify(raw[key])} for ${key}: must be ${lo} to ${hi}`);
    return v;
  };
  const dur = (key) => {
    try {
      return parseDuration(raw[key]);
    } catch {
      throw new Error(`invalid value ${JSON.stringify(raw[key])} for ${key}: a duration such as 2s`);
    }
  };
  if (!["true", "false"].includes(raw.shadow)) throw new Error(`invalid value ${JSON.stringify(raw.shadow)} for shadow: must be true or false`);
  c.shadow = raw.shadow === "true";
  c.partitions = int("partitions", 1, 1024);
  c.natsReplicas = int("nats-replicas", 1, 5);
  c.shutdownTimeoutMs = dur("shutdown-timeout");
  c.execGraceMs = dur("jsprober.exec-grace");
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(c.nodeName) || c.nodeName.length > 253) {
    throw new Error(`invalid value ${JSON.stringify(c.nodeName)} for node-name: must be a DNS subdomain`);
  }
  if (!["debug", "info", "warn", "error"].includes(c.logLevel)) throw new Error(`invalid value ${JSON.stringify(c.logLevel)} for log-level: must be one of debug, info, warn, error`);
  if (!["json", "console"].includes(c.logFormat)) throw new Error(`invalid value ${JSON.stringify(c.logFormat)} for log-format: must be one of json, console`);
  if (!c.instance) throw new Error("invalid value for jsprober.instance: empty");
  if (!c.flags.healthcheck && !c.flags.help && !c.natsURL) throw new Error("nats-url is required (jsprober embeds no NATS server)");
  if (!!c.natsTLSCert !== !!c.natsTLSKey) throw new Error("nats-tls-cert and nats-tls-key go together");
  if (c.natsNkey && c.natsCreds) throw new Error("nats-nkey and nats-creds exclude each other");
  c.dataDir = raw["data-dir"] || path.join(os.tmpdir(), "splitlet", c.nodeName);
  return c;
}
