// JSON lines on stderr, one object a line, with the keys Splitlet's Go
// stages log (zap's production form): level, ts, logger, msg, then fields
// such as pod, uid, node and subject.
const LEVELS = { debug: 0, info: 1, warn: 2, error: 3 };

export function newLogger(level = "info", format = "json", base = {}, out = process.stderr) {
  const min = LEVELS[level] ?? LEVELS.info;
  const write = (lvl, msg, fields) => {
    if (LEVELS[lvl] < min) return;
    const ts = new Date().toISOString();
    if (format === "console") {
      const extra = Object.keys({ ...base, ...fields }).length ? " " + JSON.stringify({ ...base, ...fields }) : "";
      out.write(`${ts}\t${lvl.toUpperCase()}\t${base.logger ?? ""}\t${msg}${extra}\n`);
      return;
    }
    out.write(JSON.stringify({ level: lvl, ts, ...base, msg, ...fields }) + "\n");
  };
  return {
    debug: (msg, f) => write("debug", msg, f),
    info: (msg, f) => write("info", msg, f),
    warn: (msg, f) => write("warn", msg, f),
    error: (msg, f) => write("error", msg, f),
    with: (fields) => newLogger(level, format, { ...base, ...fields }, out),
  };
}

// redactURL hides the password (or token) of a NATS URL.
export function redactURL(u) {
  return u.replace(/\/\/([^@/]*)@/, (_, info) => `//${info.includes(":") ? info.split(":")[0] + ":xxxxx" : "xxxxx"}@`);
}
