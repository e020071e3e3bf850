/**
 * The user's own store (`custom-store.ts`) checked by the contract kit: each case gets a fresh
 * key-value store (the storage); building the layer again reopens it (a restart). Claims live in
 * one process, so `claimsAcrossInstances` is not declared.
 */
import * as KeyValueStore from "@effect/platform/KeyValueStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Context from "effect/Context"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as FaultInjection from "@polyloop/testing/FaultInjection"
import * as RunLogStoreContract from "@polyloop/testing/RunLogStoreContract"
import * as CustomStore from "./custom-store.js"

/** Fresh storage per case; the returned layer opens a store over it. */
const storage = Effect.map(Layer.build(KeyValueStore.layerMemory), (kv) => CustomStore.layer.pipe(Layer.provide(Layer.succeedContext(kv))))

RunLogStoreContract.suite("KeyValueStore-backed store", storage, {
  survivesRestart: true,
  faultInjection: (plan) =>
    Effect.map(Layer.build(KeyValueStore.layerMemory), (kv) =>
      RunLogStore.layerBackend(
        Effect.map(CustomStore.makeBackend(Context.get(kv, KeyValueStore.KeyValueStore)), (backend) => FaultInjection.backend(backend, plan))
      ))
})
