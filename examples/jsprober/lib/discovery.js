// Discovery (docs/bus.md "Discovery: the NATS service API"): jsprober
// answers $SRV.PING, $SRV.INFO and $SRV.STATS as splitlet-prober, with
// metadata node, stage and implementation, and serves its StageStatus on
// splitlet.v1.<node>.status.prober and in the endpoint data of $SRV.STATS.
import { nuid } from "nats";

export const IMPLEMENTATION = "jsprober";

// semVer turns a version into the SemVer the service API requires (as
// libs/discovery.SemVer does).
export function semVer(v) {
  const s = v.replace(/^v/, "");
  if (/^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$/.test(s)) return s;
  const clean = v.replace(/[^0-9A-Za-z-]/g, "-").replace(/^-+|-+$/g, "");
  return clean ? `0.0.0-build-${clean}` : "0.0.0";
}

// name is the stage's name on the service API: prober, or shadow-prober
// for a shadow.
export async function serve(nc, { node, version, stage, subject, name = "prober" }) {
  const started = new Date();
  const status = async () => {
    // Readiness is read before the consumers are: a stage that says ready
    // has every consumer in the list that follows.
    const ready = stage.ready;
    const consumers = await stage.lags();
    return {
      node, stage: name, implementation: IMPLEMENTATION, instance: "", version,
      ready, partitions: null,
      lag: consumers.reduce((n, c) => n + c.pending + Math.max(c.ackPending, 0), 0),
      consumers, started: started.toISOString(), at: new Date().toISOString(),
    };
  };
  const svc = await nc.services.add({
    name: `splitlet-${name}`,
    version: semVer(version),
    description: `Splitlet ${name} of node ${node}`,
    metadata: { node, stage: name, implementation: IMPLEMENTATION },
    statsHandler: () => status(),
  });
  // nats.js 2.x always subscribes an endpoint in a queue group; a group of
  // this instance's own makes every instance answer, as the contract asks.
  svc.addEndpoint("status", {
    subject,
    queue: `jsprober-${nuid.next()}`,
    metadata: { returns: "StageStatus" },
    handler: async (err, msg) => {
      if (!err) msg.respond(JSON.stringify(await status()));
    },
  });
  return svc;
}
