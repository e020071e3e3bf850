/**
 * The SQLite store as the contract's killed-writer property opens it, in the child that is
 * killed and in the test process that reads back: `layerSqlite` with its defaults (WAL,
 * `synchronous=FULL`) on a file in the storage directory.
 */
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as path from "node:path"

export const open = (storage: string) => SqlRunLogStore.layerSqlite({ filename: path.join(storage, "runs.db") })
