/**
 * @polyloop/testing
 *
 * @since 0.1.0
 */

/**
 * The `ActionExecutor` contract suite (SPEC §5.1, design 0007 decision 1), parameterised by action language: the caller passes the actions to try and the statuses each may get — written by hand for any action language, or generated from a tool registry with `casesFromRegistry` (valid calls, invalid arguments, unknown tools, an action of the other language). Every round of a property tries every declared case and one generated case of each declared kind, so no kind is left out by chance. The suite never feeds one consumer's action language to another's executor. Properties: `execute` always completes with a valid `ActionOutcome` whose status is one the caller declared; `replayPolicy` is total and stable; and, given a blocking action that runs `ActionExecutorContract.block`, interruption passes through: the action's finalizer runs, no outcome is returned, the fiber exits interrupted.
 */
export * as ActionExecutorContract from "./ActionExecutorContract.js"

/**
 * The loop test suite: `Agent.run` end to end over a store under test. A store package calls `suite("sqlite", () => mySqliteLayer)` inside a vitest file; every test builds the layer anew, so each test has a FRESH store (the layer must not share state between builds).
 */
export * as AgentLoopSuite from "./AgentLoopSuite.js"

/**
 * The contract of a store's blobs (design 0330), for any `RunLogStore` whose `blobs` capability is set: `BlobsContract.suite("my store", myStore, options)`. Blobs read back byte for byte under the SHA-256 of their bytes; putting the same bytes twice gives the same hash; a hash never put reads as `None`; `has` names exactly the stored ones; refs are replaced by name, listed by prefix in name order, and two runs never see each other's refs; and, with `survivesRestart`, all of it reads back after the storage is reopened.
 */
export * as BlobsContract from "./BlobsContract.js"

/**
 * The `DecisionParser` contract suite (SPEC §5, design 0007 decision 3): on any reply — arbitrary unicode, lone surrogates, empty, huge, dense in the syntax parsers react to, plus replies in the caller's own format — `parse` never fails and never dies, returns a valid `ParsedReply`, and is deterministic (resume re-parses); `id` is stable. The suite never assumes an action language: the caller's well-formed replies come in through `replies`.
 */
export * as DecisionParserContract from "./DecisionParserContract.js"

/**
 * The `EventSink` contract suite (SPEC §5, §9): a healthy sink accepts every event; a sink that can be read back delivers the events in the order emitted, none lost; a sink that cannot deliver fails `emit` with `EventDeliveryError` only (no defect, no interruption, no silent success), and a run through `Agent.run` with it finishes exactly as with no sink, counting the failures. Events are generated from the `LoopEvent` Schema.
 */
export * as EventSinkContract from "./EventSinkContract.js"

/**
 * Fault injection for stores and executors: a `FaultPlan` a store under test consults before each physical record write (armed faults fail that write with `StoreError`, once), wrappers that route a `RunLogStore.Backend` or a whole store through a plan, and an executor wrapper that turns chosen actions into environment failures or makes them hang until interrupted.
 */
export * as FaultInjection from "./FaultInjection.js"

/**
 * The `ModelClient` contract suite (SPEC §5, §11): for any request, a provider that answers gives a valid `ModelReply` (exactly the provider's, with `exactReplies`); transport failures, rate limits (429) and server errors (5xx) fail with `ModelError { retryable: true }`; every other rejection (4xx) with `retryable: false`; nothing else escapes (no defect); and, when the client supports a hanging provider, interrupting `generate` aborts the call in flight. The caller maps each generated `Condition` onto its transport (e.g. a fake HTTP server on loopback answering with that status) and returns a client facing it. A client whose provider cannot express some requests (a setting its API lacks) declares them with `refuses`: it must refuse those with a non-retryable `ModelError`. A client that streams (design 0180) must stream what it generates: facing the same provider, its deltas fold into exactly `generate`'s reply, and it fails where `generate` fails, as retryably.
 */
export * as ModelClientContract from "./ModelClientContract.js"

/**
 * The `RunLogStore` contract suite (SPEC §7, §14): property-based checks any store runs inside its own vitest file — `RunLogStoreContract.suite("my store", myLayer, options)`. Generated runs read back as exactly the prefix written, records round-trip exactly, unknown runs read as the empty log, out-of-sequence writes are rejected with `ConcurrentWriter`, `completeStep` is atomic (under interruption, and under injected storage faults), interrupted operations leak nothing later ones wait for, claims are exclusive and released, and instances never see each other's state; and, run in a child process killed by SIGKILL at random moments, the store keeps whole writes, every acknowledged one among them. Capabilities a store may lack are options (`survivesRestart`, `claimsAcrossInstances`, `faultInjection`, `killedWriter`), never adapter names.
 */
export * as RunLogStoreContract from "./RunLogStoreContract.js"

/**
 * A scripted `ModelClient` for tests, examples and benchmarks: replies from a list (one per step) or from a function of the request and the step; records every request it saw; can fail a given number of times with a retryable or non-retryable `ModelError`; can be slow (on `Clock`, so `TestClock` drives it); can run a hook before replying (signal a `Deferred`, then block, to interrupt a run mid-call); can stream its replies in chunks (design 0180), slowly, holding a delta back, or cut after some of them (a retryable `ModelError`, as a lost connection is).
 */
export * as ScriptedModel from "./ScriptedModel.js"

/**
 * Is a request valid for every provider (design 0300)? `Pairing.problems(messages)`: every call answered once, in order, no answer without its call.
 */
export * as Pairing from "./Pairing.js"

/**
 * A tracer that keeps every span it makes, to test a program's spans without an OpenTelemetry SDK: `const recorder = yield* SpanRecorder.make`, run the program under `Effect.withTracer(recorder.tracer)`, then read `recorder.spans` (names, parents, attributes, kinds). The spans are Effect's own (the built-in tracer makes them), so a program traced by it pays what it pays under any tracer other than the built-in one — polyloop's per-step spans are made.
 */
export * as SpanRecorder from "./SpanRecorder.js"
