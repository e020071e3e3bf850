/**
 * @polyloop/sandbox
 *
 * @since 0.1.0
 */

/**
 * An `ActionExecutor` for code actions (design 0330): Python (the system `python3`) and JavaScript (`node`), one persistent interpreter per run and language holding its variables from one step to the next, isolated with bubblewrap (no network, a read-only system, one writable workspace per run, a private `/tmp`), limited in wall time and CPU time per action, memory, processes and output; after every action that ran, its variables and workspace are saved as content-addressed blobs in the run store, and a new interpreter (after a resume, a crash, a fork or a kill) is restored from the newest snapshot the run's log records as executed.
 */
export * as Sandbox from "./Sandbox.js"
