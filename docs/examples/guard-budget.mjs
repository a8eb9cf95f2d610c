#!/usr/bin/env node
// An external guard for `fleet replay`, in JavaScript: a starting point for a team's own guard.
//
//   fleet replay SESSIONS --policy default --policy "cmd:node docs/examples/guard-budget.mjs 4"
//
// It speaks the replay protocol (docs/replay-protocol.md): one JSON object per line on stdin, and exactly one
// JSON line answered on stdout for each, in order. Nothing else may go to stdout; write logs to stderr (the
// harness shows the last stderr line when something goes wrong). Node 20 or later, no dependencies.
//
// Two rules:
//   * a run-progress budget: stop at the Nth consecutive failed result (N from the first argument or
//     GUARD_BUDGET_FAILURES, default 4). A result failed when it has isError: true, a details.status of
//     failed, error or blocked, or a details.exitCode other than 0. Any result that did not fail resets the count.
//   * a recursive-delete refusal: an `exec` call whose arguments.command holds `rm -r`, `rm -rf` (any order or
//     case of the flags) or `rm --recursive` is refused before it runs, and the run stops there.
// A stop is sticky: every later call of the session is refused.

import { createInterface } from "node:readline";

const PROTOCOL = 1;
const LIMIT = Number.parseInt(process.argv[2] ?? process.env.GUARD_BUDGET_FAILURES ?? "4", 10);
if (!Number.isInteger(LIMIT) || LIMIT < 1) {
  process.stderr.write(`guard-budget: the failure limit must be a whole number >= 1, not ${process.argv[2]}\n`);
  process.exit(2);
}

// `rm`, then flags of which one is short and holds r/R (-r, -rf, -fR ...) or is --recursive.
const RECURSIVE_RM = /(^|[\s;&|(`])rm\s+(?:-\S+\s+)*(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)(\s|$)/;
const FAILED_STATUS = new Set(["failed", "error", "blocked"]);

function failed(result) {
  const details = result?.details ?? {};
  if (result?.isError === true) return true;
  if (FAILED_STATUS.has(details.status)) return true;
  return Number.isInteger(details.exitCode) && details.exitCode !== 0;
}

// The state of one session (a `session` message starts a fresh one).
let consecutive = 0;
let stopped = null; // the stop, once there is one: { reason, text }

function stop(family, reason, text, extra = {}) {
  stopped = { reason, text };
  return { decision: "stop", family, reason, text, ...extra };
}

function answer(message) {
  switch (message.type) {
    case "hello":
      return { protocol: PROTOCOL, name: `guard-budget.mjs (${LIMIT} consecutive failures, no rm -r)` };
    case "session":
      consecutive = 0;
      stopped = null;
      return { decision: "ok" };
    case "round":
      return { decision: "allow" };
    case "call": {
      if (stopped) {
        return { decision: "refuse", rule: "guard-budget", reason: "after_stop",
                 text: `error: the run was stopped (${stopped.text}); this call did not run.` };
      }
      const command = message.arguments?.command;
      if (message.tool === "exec" && typeof command === "string" && RECURSIVE_RM.test(command)) {
        // `text` is what the model is told instead of a result; `stop_text` is why the run stopped.
        return stop("recursive_delete", "recursive_delete", "refused recursive delete", {
          rule: "recursive_delete",
          text: "Refused: this command deletes recursively, which the owner did not ask for. Tool use is over.",
          stop_text: "refused recursive delete",
        });
      }
      return { decision: "allow" };
    }
    case "result":
      consecutive = failed(message.result) ? consecutive + 1 : 0;
      if (!stopped && consecutive >= LIMIT) {
        return stop("run_progress", "consecutive_failures", `${consecutive} consecutive failures`);
      }
      return { decision: "allow" };
    case "cut":
      return { decision: "continue" }; // a reply cut at the output limit: let the model go on
    case "end":
      return { decision: "ok" }; // no receipt of our own: the harness builds it from the stop or the answer
    default:
      return { decision: "error", text: `unknown message type ${JSON.stringify(message.type)}` };
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let reply;
  try {
    reply = answer(JSON.parse(line));
  } catch (error) {
    reply = { decision: "error", text: `cannot use the message: ${error.message}` };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
}
