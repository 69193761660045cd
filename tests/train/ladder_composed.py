#!/usr/bin/env python3
"""The ladder's composed rung (dp2 x tp2 x pp2, ZeRO-1, sequence parallelism, sqrt checkpointing,
bf16) end to end: `scalelab ladder --stages 00,01-07` trains it under mpirun beside stage 00, and
its row must (1) train as stage 00 does (max |loss - stage 00| within 1e-3 over the steps: the
composed run adds the same numbers in another order and rounds them to bf16, which moves the loss
of these first steps by about 1.5e-4, measured) and (2) report for rank 0 exactly the memory by
category and the bytes per step that `scalelab plan` predicts for the same layout of the same
model (the planner's validation, issue 15, on the rung the README's main command shows).

    ladder_composed.py SCALELAB_CLI WORK_DIR
"""
import json
import subprocess
import sys
from pathlib import Path

cli, work = sys.argv[1], Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
ladder_json = work / "ladder.json"
plan_json = work / "plan.json"
steps, batch, T = 2, 16, 256  # T = mini's context, so the planner's model is the trained one
# One validation batch, not four: the validation loss is checked nowhere here (a quarter of the run).
subprocess.run([cli, "ladder", "--stages", "00,01-07", "--steps", str(steps), "--batch", str(batch), "--seq-len",
                str(T), "--val-batches", "1", "--json", str(ladder_json)], check=True, stdout=subprocess.DEVNULL)
rows = {r["stage"]: r for r in json.loads(ladder_json.read_text())["rows"]}
row = rows["01-07"]
failures = []
if row["ranks"] != 8 or row["layout"] != "dp2 tp2 pp2 z1":
    failures.append(f"the composed rung ran {row['ranks']} ranks as '{row['layout']}', expected 8 as 'dp2 tp2 pp2 z1'")
diff = row["max_loss_diff_vs_00"]
if diff is None or diff > 1e-3:
    failures.append(f"max |loss - stage 00| = {diff}, expected <= 1e-3")

subprocess.run([cli, "plan", "--model", "mini", "--nodes", "1", "--gpus-per-node", "8", "--batch", str(batch),
                "--precision", "bf16", "--attention", "naive", "--dp", "2", "--tp", "2", "--pp", "2", "--zero", "1",
                "--micro-batches", "4", "--schedule", "1f1b", "--checkpoint", "sqrt", "--json", str(plan_json)],
               check=True, stdout=subprocess.DEVNULL)
layouts = [l for l in json.loads(plan_json.read_text())["layouts"] if l["sequence_parallel"]]
if len(layouts) != 1:
    sys.exit(f"ladder_composed: the planner gave {len(layouts)} sequence-parallel layouts for the rung, expected 1")
want = layouts[0]["per_pipeline_rank"][0]
got = row["peak_bytes"]
for category in ("params", "grads", "optimizer", "activations"):
    if got[category] != want[category]:
        failures.append(f"rank 0 {category}: measured {got[category]:,} bytes, planned {want[category]:,.0f} "
                        f"(off by {got[category] - want[category]:+,.0f})")
if row["comm_bytes_per_step"] != want["bytes_sent"]:
    failures.append(f"rank 0 sent {row['comm_bytes_per_step']:,} bytes per step, planned {want['bytes_sent']:,.0f}")
if failures:
    sys.exit("ladder_composed: " + "; ".join(failures))
print(f"ladder_composed: the composed rung matches stage 00 (max |dloss| {diff:.2e}) and the planner "
      f"(params/grads/optimizer/activations {got['params']:,}/{got['grads']:,}/{got['optimizer']:,}/"
      f"{got['activations']:,} bytes, {row['comm_bytes_per_step']:,.0f} bytes sent per step)")
