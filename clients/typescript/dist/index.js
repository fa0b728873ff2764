/**
 * Client and participant runner for the two-phase-commit checkpoint coordinator.
 *
 * ```ts
 * import { Coordinator, Runner } from "@twophase/coordinator";
 * const coord = new Coordinator("http://127.0.0.1:8080");
 * await new Runner(coord, "orders", "ts-sink", { prepare, commit, abort }).run(signal);
 * ```
 */
export * from "./coordinator.js";
export * from "./errors.js";
export * from "./runner.js";
