/**
 * The entry point of the `polyloop` command (run by `bin/polyloop.js`). Failures are printed as
 * one line (`polyloop: …`) without a stack trace; usage errors exit with code 2 (the usage is
 * printed by `@effect/cli`), other failures with code 1.
 *
 * @since 0.1.0
 */
import * as ValidationError from "@effect/cli/ValidationError"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Cli from "./Cli.js"
import * as CliError from "./CliError.js"

const main = Cli.run(process.argv).pipe(
  Effect.tapError((error) => (ValidationError.isValidationError(error) ? Effect.void : Console.error(`polyloop: ${CliError.describe(error)}`))),
  Effect.tapDefect((defect) => Console.error(`polyloop: unexpected failure (please report it): ${CliError.describe(defect)}`)),
  Effect.provide(NodeContext.layer)
)

NodeRuntime.runMain(main, {
  disableErrorReporting: true,
  teardown: (exit, onExit) => {
    if (Exit.isSuccess(exit) || Cause.isInterruptedOnly(exit.cause)) return onExit(Exit.isSuccess(exit) ? 0 : 130)
    const failure = Cause.failureOption(exit.cause)
    onExit(Option.isSome(failure) && ValidationError.isValidationError(failure.value) ? 2 : 1)
  }
})
