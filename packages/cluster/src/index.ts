/**
 * @polyloop/cluster
 *
 * @since 0.1.0
 */

/**
 * The client side of the cluster (design 0200): `submit(runId, payload)` sends the run's persisted `Start` (durable in the database before it returns; idempotent by run id), `status` and `list` read the run index, `await` waits for a run's end, `decide` delivers a person's decision to a suspended run, `retry` runs a failed run again, `live` asks the runner holding a run what it is doing. Any process with `Sharding` can use it: a runner, or a client started with `layerClient` (it holds no shard).
 */
export * as Cluster from "./Cluster.js"

/**
 * A runner process of the cluster (design 0200): `layer` gives the entity `polyloop/Run` its behaviour — decode the payload, `resolve` it to a `RunRequest` and an executor, run it with `Agent.run` (resuming it from its log), retry what a retry can cure, wait while it is suspended — and `layerSocket` makes the process a runner of `@effect/cluster` over TCP (`NodeClusterSocket`), with messages, runners and shard locks in the `SqlClient`'s database.
 */
export * as ClusterRunner from "./ClusterRunner.js"

/**
 * A polyloop run as an `@effect/cluster` entity (design 0200): the entity `polyloop/Run`, keyed by the run id, and its three messages. `Start` (persisted, one per run: its primary key is fixed) carries the JSON payload the application turns into a `RunRequest`; its reply is the run's end. `Decide` (persisted, one per call id and decision) records a person's decision and wakes the suspended run. `Status` (volatile) asks the runner holding the entity what it is doing.
 */
export * as RunEntity from "./RunEntity.js"

/**
 * The index of runs submitted to the cluster (`polyloop_cluster_runs`, design 0200): one row per run with its payload, where it is (`Submitted`, `Running`, `Retrying`, `Suspended`, `Finished`, `Failed`), how many attempts and failures it had, the runner that last held it, its last error and its result. An index, not a queue: `@effect/cluster` decides what runs where; the rows answer `Cluster.status`, `Cluster.list` and `Cluster.await` without asking a runner, and keep a failed run's error. Same SQL on PostgreSQL and SQLite.
 */
export * as RunIndex from "./RunIndex.js"
