// What an idle fleet of TypeScript Runners costs the coordinator: --participants Runners of
// one job in this one process, each waiting in its long-poll of --wait-ms, no checkpoints
// opened. After --warmup seconds it measures, for --duration seconds, the requests the
// coordinator served (from its /metrics), the coordinator's CPU (from /proc,
// --coordinator-pid) and this process's, and prints them. The same shape as
// `coordinator fleet --idle --jobs 1 --participants N --wait W`, for the Go Runner.
//
//   node clients/typescript/examples/idle-fleet.mjs --url http://127.0.0.1:8080 \
//       --coordinator-pid $(pgrep -f 'coordinator serve') --participants 500 --wait-ms 30000
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Coordinator, Runner } from "@twophase/coordinator";

const { values } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8080" },
    "coordinator-pid": { type: "string" },
    participants: { type: "string", default: "500" },
    "wait-ms": { type: "string", default: "30000" },
    warmup: { type: "string", default: "5" },
    duration: { type: "string", default: "60" },
    job: { type: "string", default: "idle-typescript" },
  },
});
const url = values.url;
const token = process.env.COORDINATOR_TOKEN;
const n = Number(values.participants);
const waitMs = Number(values["wait-ms"]);
const pid = Number(values["coordinator-pid"]);
if (!pid) throw new Error("--coordinator-pid is required");
const sleep = (s) => new Promise((r) => setTimeout(r, s * 1000));
const cpuSeconds = (p) => {
  const fields = readFileSync(`/proc/${p}/stat`, "utf8").split(")").pop().trim().split(/\s+/);
  return (Number(fields[11]) + Number(fields[12])) / 100; // clock ticks of 10 ms
};
async function requestsServed() {
  const res = await fetch(`${url}/metrics`, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
  const text = await res.text();
  return [...text.matchAll(/^coordinator_http_requests_total\{.*\} (\S+)$/gm)].reduce((a, m) => a + Number(m[1]), 0);
}

const quiet = { debug() {}, info() {}, warn: (m, f) => console.warn(m, f) };
const coord = new Coordinator(url, { token, logger: quiet });
const names = Array.from({ length: n }, (_, i) => `p${i}`);
await coord.putJob(values.job, { participants: names });
const stop = new AbortController();
const runners = names.map((name) => new Runner(coord, values.job, name,
  { prepare: () => [], commit() {}, abort() {} }, { waitMs, logger: quiet }));
const done = runners.map((r) => r.run(stop.signal));
while (runners.some((r) => r.epoch === 0)) await sleep(0.1);
await sleep(Number(values.warmup));
const [r0, c0, s0, t0] = [await requestsServed(), cpuSeconds(pid), cpuSeconds(process.pid), performance.now()];
await sleep(Number(values.duration));
const [r1, c1, s1, t1] = [await requestsServed(), cpuSeconds(pid), cpuSeconds(process.pid), performance.now()];
const elapsed = (t1 - t0) / 1000;
console.log(`idle typescript fleet: ${n} runners of one job, wait ${waitMs} ms, ${elapsed.toFixed(0)} s: ` +
  `${((r1 - r0 - 1) / elapsed).toFixed(1)} requests/s served, coordinator ${((100 * (c1 - c0)) / elapsed).toFixed(2)} % of a core, ` +
  `fleet ${((100 * (s1 - s0)) / elapsed).toFixed(2)} % of a core, fleet RSS ${(process.memoryUsage().rss / 2 ** 20).toFixed(0)} MiB`);
stop.abort();
await Promise.all(done);
