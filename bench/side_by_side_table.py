#!/usr/bin/env python3
"""The side-by-side step table: our step benchmarks against diffusers eager and diffusers +
torch.compile, same model, same shapes, same GPU, same device call (scripts/gpu-bench.sh stage 11).

  python3 bench/side_by_side_table.py OUT_DIR [OUT_DIR ...] [--out OUT_DIR/side_by_side.md]

Reads, for each model (flux1, flux2, qwenimage), what stage 11 leaves in OUT_DIR:
  sbs_<model>_ours.txt                 our ditserve-<model>-bench's output ("median X ms/step ...")
  sbs_<model>_ours_fp8.txt             the same with --weights fp8 (optional: an FP8 column, with
                                       the FP8 step's relative error against bf16 in the notes)
  sbs_<model>_diffusers_eager.json     bench/diffusers_step.py --out (eager)
  sbs_<model>_diffusers_compile.json   bench/diffusers_step.py --compile --out
and writes a markdown table with a row for each model that has any of them: the three medians,
the compile wait, ours against each (e.g. "1.28x faster"), and the model's step-time goal met or
the distance to it, then the shapes, runs, parameter counts and peak memory behind each row, with
a warning where our benchmark's shapes or parameter count differ from diffusers'. With several
OUT_DIRs (one device call each), a model's row comes from the last directory that has its files;
a row never mixes files of two directories. Standard library only."""
import argparse
import json
import re
import sys
from pathlib import Path

# (key, released name, goal for our ms per transformer pass, goal's wording)
MODELS = [
    ("flux1", "FLUX.1-dev", 115.0, "a step"),
    ("flux2", "FLUX.2-dev", 420.0, "a step"),
    ("qwenimage", "Qwen-Image", 110.0, "a pass"),
]
# The FP8 step-time goals (issue 15): FLUX.1-dev only.
FP8_GOALS = {"flux1": 80.0}
FP8_ERROR = re.compile(r"fp8 weights: step output relative error ([\d.eE+-]+)")
OURS_MEDIAN = re.compile(r"median ([\d.]+) ms/step\s+\(min ([\d.]+), max ([\d.]+), (\d+) runs after (\d+) warmup\)")
OURS_SHAPES = re.compile(r"batch (\d+), (\d+) image(?: \([^)]*\))? \+ (\d+) text tokens")
OURS_PARAMS_EXACT = re.compile(r"(\d+) params")
OURS_PARAMS_B = re.compile(r"([\d.]+) B params")
NONE = "—"


def files(d, key):
    d = Path(d)
    return {"ours": d / f"sbs_{key}_ours.txt", "fp8": d / f"sbs_{key}_ours_fp8.txt",
            "eager": d / f"sbs_{key}_diffusers_eager.json",
            "compile": d / f"sbs_{key}_diffusers_compile.json"}


def read_ours(path):
    """Our benchmark's figures, or None when the file is absent; {"error": ...} without a median."""
    if not path.exists():
        return None
    text = path.read_text(errors="replace")
    m = OURS_MEDIAN.search(text)
    if not m:
        lines = [l for l in text.splitlines() if l.strip()]
        return {"error": lines[-1] if lines else "no output"}
    r = dict(median_ms=float(m[1]), min_ms=float(m[2]), max_ms=float(m[3]), runs=int(m[4]), warmup=int(m[5]))
    if s := OURS_SHAPES.search(text):
        r.update(batch=int(s[1]), image_tokens=int(s[2]), text_tokens=int(s[3]))
    if p := OURS_PARAMS_EXACT.search(text):
        r["params"] = int(p[1])
    elif p := OURS_PARAMS_B.search(text):
        r["params_b"] = float(p[1])  # printed to 3 decimals
    r["header"] = next((l for l in text.splitlines() if "transformer:" in l), "")
    if e := FP8_ERROR.search(text):
        r["fp8_error"] = float(e[1])
    return r


def read_json(path):
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        return {"error": f"unreadable {path.name}: {e}"}


def ok(r):
    return r is not None and "error" not in r and "median_ms" in r


def speedup(ours, theirs):
    """Ours against theirs, as "1.28x faster" / "1.10x slower" (their time over ours)."""
    if not (ok(ours) and ok(theirs)):
        return NONE
    r = theirs["median_ms"] / ours["median_ms"]
    return f"{r:.2f}x faster" if r >= 1 else f"{1 / r:.2f}x slower"


def ms_cell(r, extra=""):
    if r is None:
        return NONE
    if "error" in r:
        return f"failed ({r['error'].split(':')[0]})"
    return f"{r['median_ms']:.1f} ({r['min_ms']:.1f}–{r['max_ms']:.1f}){extra}"


def compile_cell(r):
    if not ok(r):
        return ms_cell(r)
    scope = "regional; " if r.get("mode") == "compile-regional" else ""
    wait = f", {scope}compile wait {r['compile_s']:.0f} s" if "compile_s" in r else ""
    return ms_cell(r, wait)


def goal_cell(ours, goal, per):
    label = f"<= {goal:g} ms {per}"
    if not ok(ours):
        return f"{label}: {NONE}"
    ms = ours["median_ms"]
    if ms <= goal:
        return f"{label}: met ({goal - ms:.1f} ms under)"
    return f"{label}: {ms - goal:.1f} ms over (+{(ms / goal - 1) * 100:.0f}%)"


def mismatches(ours, theirs):
    """What differs between our run and a diffusers run: shapes, parameter count."""
    if not (ok(ours) and ok(theirs)):
        return []
    out = []
    for k in ("batch", "image_tokens", "text_tokens"):
        if k in ours and ours[k] != theirs.get(k):
            out.append(f"{k} {ours[k]} (ours) vs {theirs.get(k)} ({theirs['mode']})")
    n = theirs.get("params")
    if n is not None:
        if "params" in ours and ours["params"] != n:
            out.append(f"params {ours['params']} (ours) vs {n} ({theirs['mode']})")
        elif "params_b" in ours and abs(ours["params_b"] - n / 1e9) > 0.0006:
            out.append(f"params {ours['params_b']:.3f} B (ours) vs {n / 1e9:.3f} B ({theirs['mode']})")
    return out


def runs_text(r):
    if not ok(r):
        return r["error"] if r and "error" in r else "not run"
    s = f"{r['runs']} runs after {r['warmup']} warm-up"
    if "peak_gib" in r:
        s += f", {r['params'] / 1e9:.2f} B params, peak {r['peak_gib']:.1f} GiB allocated"
    return s


def table(dirs):
    rows, notes, env = [], [], {}
    for key, name, goal, per in MODELS:
        found = [d for d in dirs if any(p.exists() for p in files(d, key).values())]
        if not found:
            continue
        f = files(found[-1], key)
        ours, eager, comp = read_ours(f["ours"]), read_json(f["eager"]), read_json(f["compile"])
        fp8 = read_ours(f["fp8"])
        bad = mismatches(ours, eager) + mismatches(ours, comp)
        flag = " (inputs differ!)" if bad else ""
        fp8_cell = NONE
        if fp8 is not None:
            fp8_cell = ms_cell(fp8)
            if ok(fp8) and ok(comp):
                fp8_cell += f"; {speedup(fp8, comp)} than compiled"
            if key in FP8_GOALS:
                fp8_cell += f"; {goal_cell(fp8, FP8_GOALS[key], per)}"
        rows.append(f"| {name}{flag} | {ms_cell(ours)} | {ms_cell(eager)} | {compile_cell(comp)} | "
                    f"{speedup(ours, eager)} | {speedup(ours, comp)} | {goal_cell(ours, goal, per)} | "
                    f"{fp8_cell} |")
        shapes = next((f"batch {r['batch']}, {r['image_tokens']} image + {r['text_tokens']} text tokens, "
                       f"{r['dtype']}" for r in (eager, comp) if r and "batch" in r), None)
        if shapes is None and ok(ours) and "batch" in ours:
            shapes = f"batch {ours['batch']}, {ours['image_tokens']} image + {ours['text_tokens']} text tokens"
        notes.append(f"- {name} ({found[-1]}): {shapes or 'shapes unknown'}. ditserve: {runs_text(ours)}. "
                     f"diffusers eager: {runs_text(eager)}. diffusers + torch.compile: {runs_text(comp)}.")
        notes.extend(f"  - warning: {m}" for m in bad)
        if ok(fp8) and "fp8_error" in fp8:
            notes.append(f"  - `--weights fp8`: step output relative error {fp8['fp8_error']:.3g} against "
                         "the same weights in bf16.")
        for r in (eager, comp):
            if ok(r):
                env = {k: r[k] for k in ("gpu", "torch", "diffusers") if k in r}
    if not rows:
        return None
    head = ["## Transformer step time: ditserve against diffusers (same call, same shapes)", ""]
    if env:
        head += [f"{env.get('gpu', 'GPU ?')}; torch {env.get('torch', '?')}, diffusers {env.get('diffusers', '?')}; "
                 "random weights at the released sizes, bf16; ms per transformer forward, median "
                 "(min–max), each forward bracketed by device synchronisation.", ""]
    head += ["| model | ditserve ms/step | diffusers eager | diffusers + torch.compile | ours vs eager | "
             "ours vs compiled | goal | ditserve `--weights fp8` |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    return "\n".join(head + rows + [""] + notes) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", help="stage 11's output directories (later ones win per model)")
    ap.add_argument("--out", help="markdown file to write (default: print only)")
    a = ap.parse_args()
    md = table(a.dirs)
    if md is None:
        print(f"no sbs_<model>_* results in {' '.join(a.dirs)}", file=sys.stderr)
        return 1
    if a.out:
        Path(a.out).write_text(md)
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
