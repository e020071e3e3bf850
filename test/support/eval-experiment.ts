/**
 * An experiment module for `polyloop eval` tests (`cli-eval.test.ts`): the example's
 * multiplication agent on the dataset file `EVAL_DATASET`, `EVAL_EPOCHS` epochs (default 1), under
 * the experiment name `EVAL_NAME` (default `cli-eval`).
 */
import * as Dataset from "@polyloop/eval/Dataset"
import * as Experiment from "@polyloop/eval/Experiment"
import { experiment as example } from "@polyloop/examples/experiment"

export const experiment = Experiment.make({
  ...example,
  name: process.env["EVAL_NAME"] ?? "cli-eval",
  dataset: Dataset.fromJsonl(process.env["EVAL_DATASET"] ?? "dataset.jsonl"),
  epochs: Number(process.env["EVAL_EPOCHS"] ?? 1)
})
