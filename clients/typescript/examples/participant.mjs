import { Coordinator, Runner, TooManyCheckpoints } from "@twophase/coordinator";

const coord = new Coordinator(process.env.COORDINATOR_URL ?? "http://127.0.0.1:8080");
await coord.putJob("orders", { participants: ["ts-sink"] }); // once, by whoever runs the job
const stop = new AbortController();
process.on("SIGINT", () => stop.abort());

const sink = {
  prepare: async (checkpoint) => [{ file: `orders-${checkpoint}.tmp` }], // durable, invisible
  commit: async (checkpoint, committables) => console.log("committed", checkpoint, committables), // idempotent
  abort: async (checkpoint, committables) => console.log("rolled back", checkpoint, committables),
};

// A checkpoint a second; normally the pipeline's own trigger does this.
const timer = setInterval(() => coord.openCheckpoint("orders").catch((e) => {
  if (!(e instanceof TooManyCheckpoints)) console.error(e);
}), 1000);
stop.signal.addEventListener("abort", () => clearInterval(timer));

await new Runner(coord, "orders", "ts-sink", sink).run(stop.signal);
