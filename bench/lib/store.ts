/**
 * Opening the SQLite store for a measurement: the layer is built (file opened, migrations
 * checked) before the clock starts, and closed after it stops.
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

/**
 * Runs `use` with a SQLite store on `filename` (WAL, `synchronous=FULL` unless told otherwise:
 * the JIT warm-up writes with `NORMAL`), closing it afterwards.
 */
export const withSqlite = <A, E>(
  filename: string,
  use: (store: RunLogStore.RunLogStore.Service) => Effect.Effect<A, E>,
  synchronous: "FULL" | "NORMAL" = "FULL"
): Promise<A> =>
  Effect.runPromise(
    Effect.scoped(
      Effect.flatMap(Layer.build(SqlRunLogStore.layerSqlite({ filename, synchronous })), (context) =>
        use(Context.get(context, RunLogStore.RunLogStore)))
    )
  )
