#!/usr/bin/env python3
"""Writes docs/results/gpu-<device>.md from what tools/gpu_measure.sh left in its output folder:
env.log (the device), gpu_tests.log (ctest), kernels.json (scalelab_gpu_bench), step.json
(scalelab_gpu_step_bench) and torch.json (tools/torch_gpu_bench.py). The headline is the ratio
of scalelab's training step to PyTorch's on the same GPU in the same run (tokens/s).

    python3 tools/gpu_report.py --dir out/gpu --docs docs/results

Standard library only. Missing inputs are reported as missing, never invented.
"""
import argparse
import json
import re
import sys
from pathlib import Path


def load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def rows_of(data) -> list:
    """The list of row objects in a result file, whatever it is wrapped in."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        for key in ("rows", "kernels", "results", "steps"):
            if isinstance(data.get(key), list):
                return data[key]
    return []


def table(rows: list, columns: list | None = None) -> str:
    if not rows:
        return "(none)\n"
    if not columns:  # every key of every row, in first-seen order (rows may differ in their keys)
        columns = []
        for r in rows:
            columns += [c for c in r if c not in columns and not isinstance(r[c], (dict, list))]
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        out.append("| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |")
    return "\n".join(out) + "\n"


def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    if isinstance(v, int) and abs(v) >= 1e4:
        return f"{v:,}"
    return str(v)


def device_name(env_log: str) -> str:
    for line in env_log.splitlines():
        if line.startswith("NVIDIA") or line.startswith("Tesla"):
            return line.split(",")[0].strip()
    return "unknown GPU"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def ratios(ours: list, peer: list) -> list:
    """scalelab tokens/s over PyTorch's, per precision, against each PyTorch mode."""
    out = []
    for o in ours:
        prec, tps = o.get("precision") or o.get("variant"), o.get("tokens_per_s")
        base = (prec or "").split("+")[0]  # "bf16+flash": scalelab's flash attention, same precision
        if base not in ("fp32", "bf16", "fp16") or not tps:  # tf32 has no PyTorch row (it runs TF32 off)
            continue
        row = {"precision": prec, "scalelab tokens/s": tps}
        for p in peer:
            if p.get("precision") == base and p.get("tokens_per_s") and "error" not in p:
                key = f"vs PyTorch {p['mode']} ({p['attention']} attention)"
                row[key] = round(tps / p["tokens_per_s"], 3)
        out.append(row)
    return out


def with_mfu(rows: list, peak) -> list:
    """Fills MFU (model TFLOP/s over the bf16 GEMM ceiling measured in the same run) where the step
    benchmark ran without --peak-tflops."""
    for r in rows:
        if peak and not r.get("mfu") and r.get("tflops"):
            r["mfu"] = round(r["tflops"] / peak, 4)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="gpu_measure.sh's output folder")
    ap.add_argument("--docs", type=Path, default=Path("docs/results"))
    a = ap.parse_args()
    env_log = (a.dir / "env.log").read_text() if (a.dir / "env.log").exists() else ""
    name = device_name(env_log)
    kernels, step, torch = (load(a.dir / f) for f in ("kernels.json", "step.json", "torch.json"))
    tests_log = (a.dir / "gpu_tests.log").read_text() if (a.dir / "gpu_tests.log").exists() else ""
    summary = [l for l in tests_log.splitlines() if "tests passed" in l or "Passed" in l or "Failed" in l
               or "***" in l or "Skipped" in l]

    md = [f"# GPU results: {name}\n",
          "Measured by `bash tools/gpu_measure.sh` (docs/gpu.md) in one run on this device: the GPU tests, "
          "every kernel against the device's measured ceilings, the training step of the GPT-2 124M shape, "
          "and the same model in PyTorch on the same GPU. Ratios are taken within the run.\n",
          "## Device\n", "```", env_log.strip() or "(env.log missing)", "```\n",
          "## GPU tests (`ctest -L gpu`)\n", "```", "\n".join(summary) or "(gpu_tests.log missing)", "```\n"]
    ceilings = kernels.get("ceilings") if isinstance(kernels, dict) else None
    if ceilings:
        md += ["## Ceilings measured on this device\n", table(rows_of({"rows": ceilings}) if isinstance(ceilings, list)
                                                             else [ceilings])]
    md += ["## Kernels (GPT-2 124M shapes)\n", table(rows_of(kernels)) if kernels else "(kernels.json missing)\n"]
    ours, peer = rows_of(step), rows_of(torch)
    peak = ceilings.get("bf16_gemm_tflops") if isinstance(ceilings, dict) else None
    with_mfu(ours, peak)
    sweep = sorted(a.dir.glob("step_T*.json"), key=lambda f: int(re.sub(r"\D", "", f.stem) or 0))
    md += ["## Training step, GPT-2 124M\n", "scalelab:\n", table(ours) if step else "(step.json missing)\n",
           "\nPyTorch on the same GPU:\n", table(peer) if torch else "(torch.json missing)\n"]
    if sweep:
        rows = [row for f in sweep for row in with_mfu(rows_of(load(f)), peak)]
        md += ["## Training step against the sequence length T (same run)\n",
               "Memory is the tracker's peak (equal to the device pool's high-water mark in every row).\n",
               table(rows, ["variant", "B", "T", "median_ms", "tokens_per_s", "mfu", "tracked_peak_bytes",
                            "device_peak_bytes"])]
    r = ratios(ours, peer)
    md += ["## Ratio: scalelab tokens/s over PyTorch's (same run)\n", table(r) if r else "(no ratio: a side is missing)\n"]
    text = "\n".join(md)
    a.docs.mkdir(parents=True, exist_ok=True)
    target = a.docs / f"gpu-{slug(name)}.md"
    target.write_text(text)
    (a.dir / target.name).write_text(text)
    print(text)
    print(f"gpu_report: wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
