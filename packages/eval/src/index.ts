/**
 * @polyloop/eval
 *
 * @since 0.1.0
 */

/**
 * Datasets of an experiment (design 0320): samples `{ id, input, target?, metadata? }` from a JSON-lines file, an Effect `Stream` or an array, checked whole before anything runs (bad lines by number, duplicate ids refused).
 */
export * as Dataset from "./Dataset.js"

/**
 * An experiment (design 0320): a dataset through configurations × epochs, each run an ordinary polyloop run under `<experiment>/<configuration>/<sample>/<epoch>`; the definition recorded and a changed one refused; resume finishes only what is unfinished; failed runs retried up to a bound; scores computed once.
 */
export * as Experiment from "./Experiment.js"

/**
 * Where an experiment's own records live (design 0320): blobs with refs in the run store under `experiment:<name>` — definition, outcomes, failed attempts, scores.
 */
export * as ExperimentStore from "./ExperimentStore.js"

/**
 * An experiment's runs in Inspect's eval-log format (design 0320): one JSON log per configuration, as `inspect view` reads from a log directory.
 */
export * as Inspect from "./Inspect.js"

/**
 * An experiment's results (design 0320): mean, clustered standard error, seeded bootstrap 95% CI per configuration and scorer; stop reasons, steps, tokens; paired comparisons; JSON and CSV.
 */
export * as Results from "./Results.js"

/**
 * Scorers (design 0320): exact match, includes, numeric tolerance, Schema check, custom, model-graded (its verdicts kept).
 */
export * as Scorer from "./Scorer.js"
