#!/usr/bin/env python3
"""diffusers' side of the step benchmarks: one transformer forward (one denoising step) of
FLUX.1-dev, FLUX.2-dev or Qwen-Image at its released size with random bf16 weights on the GPU,
eager or under torch.compile, with exactly the inputs of our step benchmarks
(build-cuda/models/*/ditserve-*-bench: batch 1, 4096 image + 512 text tokens).

  python3 bench/diffusers_step.py --model flux1|flux2|qwenimage [--runs 10] [--warmup 3]
      [--compile [--regional]] [--reference-images N [--reference-size 1024x1024]]
      [--text-tokens 512] --out FILE.json

--reference-images N (flux2) times a step of FLUX.2 editing as diffusers' Flux2Pipeline runs
it with N reference images of --reference-size (WIDTHxHEIGHT pixels, one token per 16x16): every
call concatenates the N references' tokens after the latents (`torch.cat([latents, image_latents],
dim=1)`), passes the image ids followed by reference i's (10 + 10 i, y, x, 0) (`_prepare_image_ids`)
and keeps the generated tokens' velocity (`noise_pred[:, : latents.size(1)]`); as our
`ditserve-flux2-bench --reference-images N`. Under --compile the concatenation and the slice stay
outside the compiled model, as in the pipeline.

--reference-images N (qwenimage, 0..3) times a step of Qwen-Image-Edit-2509 as diffusers'
QwenImageEditPlusPipeline runs it with N input images whose VAE side is --reference-size (16 px a
token; the pipeline's VAE_IMAGE_SIZE makes a square image 1024x1024, 4096 tokens): the images'
packed latents concatenated after the latents on every call, img_shapes [[(1, h, w), (1, h_i, w_i)
per image]] * batch, and the output's velocity kept (`noise_pred[:, : latents.size(1)]`); as our
`ditserve-qwenimage-bench --reference-images N`. The prompt's length (which holds each image's
vision tokens in that pipeline) is --text-tokens; scripts/gpu-bench.sh stage 18 passes the same to
both sides.

The transformer (FluxTransformer2DModel / Flux2Transformer2DModel / QwenImageTransformer2DModel)
is built from the released config committed in bench/results/shapes/<model>.json (made with
diffusers by bench/header_only_checkpoint.py; its tensor list is checked against the built model)
directly on the GPU in bf16, then every parameter is refilled, seeded, the way our benchmarks make
their random weights (models/common/bench_support.h RandomWeight: ones for a 1-D "*norm*" tensor,
N(0, 0.02^2) otherwise). Each forward runs under torch.inference_mode() and is bracketed by
torch.cuda.synchronize(). --compile wraps the model in torch.compile (default mode,
fullgraph=False; --regional: diffusers' compile_repeated_blocks instead, the blocks only); the
first call, which compiles, is timed on its own (compile_s) and is not one of the warm-up runs.

Writes one JSON object to --out (times in ms, peak GPU memory, parameter count, input shapes,
versions; on failure {"error": ...} and exit status 1) and prints one line ending like our
benchmarks' "median X ms/step (min, max, N runs after M warmup)". scripts/gpu-bench.sh stage 11
runs it beside our benchmark in the same device call; bench/side_by_side_table.py makes the table.

Needs torch and diffusers' source on PYTHONPATH (the GPU host has torch; diffusers is carried)."""
import argparse
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

SHAPES_DIR = Path(__file__).resolve().parent / "results" / "shapes"

# Our benchmark's inputs per model (models/flux1/flux1_step_bench.cc, models/flux2/flux2_bench.cc,
# models/qwenimage/qwenimage_bench.cc): the diffusers class, the released shapes file, and the
# guidance value (None: the model takes none).
MODELS = {
    "flux1": dict(cls="FluxTransformer2DModel", shapes="flux1-dev.json", name="FLUX.1-dev", guidance=3.5),
    "flux2": dict(cls="Flux2Transformer2DModel", shapes="flux2-dev.json", name="FLUX.2-dev", guidance=4.0),
    "qwenimage": dict(cls="QwenImageTransformer2DModel", shapes="qwen-image.json", name="Qwen-Image",
                      guidance=None),
}

# --reference-images' limit per model: Flux2Pipeline takes 10 references; our Qwen-Image-Edit pipeline
# 3 input images (QwenImagePipeline::kMaxEditImages, and ditserve-qwenimage-bench's limit).
MAX_REFERENCES = {"flux2": 10, "qwenimage": 3}


def squarest_grid_columns(n):
    """The column count of the most square rows x cols grid holding n tokens (bench_support.h)."""
    cols = max(int(math.sqrt(n)), 1)
    while cols > 1 and n % cols:
        cols -= 1
    return cols


def build_model(model_key, seed):
    """The released-size transformer on the GPU in bf16 with seeded random weights, and the
    released shapes spec it was checked against."""
    import diffusers

    info = MODELS[model_key]
    spec = json.loads((SHAPES_DIR / info["shapes"]).read_text())
    cls = getattr(diffusers, info["cls"])
    config = {k: v for k, v in spec["config"].items() if not k.startswith("_")}
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 on the GPU: no float32 copy anywhere
    try:
        with torch.device("cuda"):
            model = cls.from_config(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval().requires_grad_(False)

    built = {k: list(v.shape) for k, v in model.state_dict().items()}
    n_built = sum(math.prod(s) for s in built.values())
    n_released = sum(math.prod(s) for s in spec["tensors"].values())
    if n_built != n_released:
        raise RuntimeError(f"{info['cls']} built from {info['shapes']} has {n_built} parameters, "
                           f"the released model {n_released}")
    if built != spec["tensors"]:
        print(f"warning: {info['cls']}'s tensor names differ from {info['shapes']} "
              f"(same parameter count)", file=sys.stderr)

    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    return model, spec, built == spec["tensors"]


def reference_grid(size):
    """--reference-size "WIDTHxHEIGHT" -> (rows, cols) of one reference's token grid (16 px a token)."""
    try:
        w, h = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise ValueError(f"--reference-size must be WIDTHxHEIGHT, got {size!r}") from None
    if w < 16 or h < 16 or w % 16 or h % 16:
        raise ValueError(f"--reference-size: each side a positive multiple of 16, got {size!r}")
    return h // 16, w // 16


def reference_ids(count, rows, cols, axes, device):
    """(count * rows * cols, axes) int64 ids: reference i's (10 + 10 i, y, x, 0), row-major, in order
    (Flux2Pipeline._prepare_image_ids with scale 10)."""
    ids = []
    for i in range(count):
        y = torch.arange(rows, device=device).repeat_interleave(cols)
        x = torch.arange(cols, device=device).repeat(rows)
        one = torch.zeros(rows * cols, axes, dtype=torch.int64, device=device)
        one[:, 0] = 10 + 10 * i
        if axes > 2:
            one[:, 1], one[:, 2] = y, x
        ids.append(one)
    return torch.cat(ids, 0)


def make_inputs(model_key, config, batch, image_tokens, text_tokens):
    """The forward's keyword arguments, as our benchmark builds them (same shapes, dtypes, ids)."""
    b, n, t = batch, image_tokens, text_tokens
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    cols = squarest_grid_columns(n)
    guidance = MODELS[model_key]["guidance"]
    kw = dict(
        hidden_states=torch.randn(b, n, config["in_channels"], **bf16),
        encoder_hidden_states=torch.randn(b, t, config["joint_attention_dim"], **bf16),
        timestep=torch.full((b,), 1.0, **bf16),
        return_dict=False,
    )
    idx = torch.arange(n, device="cuda")
    if model_key == "flux1":
        # Image ids [0, y, x] on the grid, text ids all zero, in the model dtype (as the pipeline).
        kw["pooled_projections"] = torch.randn(b, config["pooled_projection_dim"], **bf16)
        kw["guidance"] = torch.full((b,), guidance, **bf16)
        kw["img_ids"] = torch.stack([torch.zeros_like(idx), idx // cols, idx % cols], 1).to(torch.bfloat16)
        kw["txt_ids"] = torch.zeros(t, 3, **bf16)
    elif model_key == "flux2":
        # int64 ids, one column per RoPE axis: image (t=0, y, x, l=0), text (0, 0, 0, k).
        axes = len(config["axes_dims_rope"])
        kw["guidance"] = torch.full((b,), guidance, **bf16)
        img_ids = torch.zeros(n, axes, dtype=torch.int64, device="cuda")
        if axes > 2:
            img_ids[:, 1] = idx // cols
            img_ids[:, 2] = idx % cols
        txt_ids = torch.zeros(t, axes, dtype=torch.int64, device="cuda")
        txt_ids[:, axes - 1] = torch.arange(t, device="cuda")
        kw["img_ids"], kw["txt_ids"] = img_ids, txt_ids
    else:
        # One image of rows x cols packed tokens per sample (the pipeline's img_shapes form); no
        # text mask, as our default (--masked-text-tokens 0) and as the pipeline for an unpadded
        # prompt (it drops an all-ones mask).
        kw["img_shapes"] = [[(1, n // cols, cols)]] * b
        kw["encoder_hidden_states_mask"] = None
    return kw


def add_references(model_key, kw, config, count, size):
    """Editing: the reference tokens and, for FLUX.2, the joined ids (Flux2Pipeline), for Qwen-Image
    the img_shapes of the output then each image (QwenImageEditPlusPipeline); returns the step's
    forward input builder (latents + references concatenated on every call, as the pipelines) and
    the reference token count."""
    rows, cols = reference_grid(size)
    n_ref = count * rows * cols
    b, n = kw["hidden_states"].shape[:2]
    references = torch.randn(b, n_ref, config["in_channels"], device="cuda", dtype=torch.bfloat16)
    if model_key == "flux2":
        axes = len(config["axes_dims_rope"])
        kw["img_ids"] = torch.cat([kw["img_ids"], reference_ids(count, rows, cols, axes, "cuda")], 0)
    else:
        kw["img_shapes"] = [[kw["img_shapes"][0][0], *[(1, rows, cols)] * count]] * b
    latents = kw.pop("hidden_states")

    def inputs():
        return dict(kw, hidden_states=torch.cat([latents, references], dim=1))

    return inputs, n_ref, latents, references


def describe_inputs(kw):
    out = {}
    for k, v in kw.items():
        if isinstance(v, torch.Tensor):
            out[k] = {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
        elif k != "return_dict":
            out[k] = v
    return out


def timed_call(fn):
    """(output, wall ms) of one call bracketed by device synchronisation."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


def run(a, result):
    import diffusers

    result.update(diffusers=diffusers.__version__, torch=torch.__version__,
                  gpu=torch.cuda.get_device_name(0))
    t0 = time.perf_counter()
    model, spec, names_match = build_model(a.model, a.seed)
    torch.cuda.synchronize()
    params = sum(p.numel() for p in model.parameters())
    result.update(build_s=time.perf_counter() - t0, params=params, released_tensor_names_match=names_match,
                  weight_gib=torch.cuda.memory_allocated() / 2**30)

    torch.manual_seed(a.seed + 1)
    kw = make_inputs(a.model, spec["config"], a.batch, a.image_tokens, a.text_tokens)
    editing = ""
    if a.reference_images:
        inputs, n_ref, latents, references = add_references(a.model, kw, spec["config"],
                                                            a.reference_images, a.reference_size)
        result["inputs"] = describe_inputs(dict(kw, hidden_states=latents, references=references))
        result.update(reference_tokens=n_ref)
        editing = (f" + {a.reference_images} reference images of {a.reference_size} ({n_ref} tokens: "
                   f"{a.image_tokens + n_ref} image tokens a forward, velocity narrowed to "
                   f"{a.image_tokens})")
    else:
        result["inputs"] = describe_inputs(kw)

        def inputs():
            return kw
    print(f"diffusers {MODELS[a.model]['cls']} ({MODELS[a.model]['name']}): {params} params "
          f"({params / 1e9:.2f} B), cuda bfloat16, batch {a.batch}, {a.image_tokens} image + "
          f"{a.text_tokens} text tokens{editing}, {result['mode']}; diffusers {diffusers.__version__}, "
          f"torch {torch.__version__}", flush=True)

    n_out = a.image_tokens

    def step(fn):  # one denoising step's transformer call, as the pipeline makes it
        return fn(**inputs())[0][:, :n_out]

    torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        fn = model
        if a.compile:
            t0 = time.perf_counter()
            if a.regional:
                model.compile_repeated_blocks()  # default mode, fullgraph=False, as torch.compile
            else:
                fn = torch.compile(model)
            # The first call compiles (lazily): its wall time is the compile wait.
            out, ms = timed_call(lambda: step(fn))
            result["compile_s"] = time.perf_counter() - t0
            result["first_call_ms"] = ms
            print(f"compiled: first call {result['compile_s']:.1f} s", flush=True)
        warm, times = [], []
        for i in range(a.warmup + a.runs):
            out, ms = timed_call(lambda: step(fn))
            if i == 0:
                result["output_finite"] = bool(torch.isfinite(out).all().item())
                if not result["output_finite"]:
                    print("warning: non-finite output", file=sys.stderr)
            (warm if i < a.warmup else times).append(ms)
    result.update(
        warmup_ms=warm, times_ms=times, median_ms=statistics.median(times), min_ms=min(times),
        max_ms=max(times), peak_gib=torch.cuda.max_memory_allocated() / 2**30,
        peak_reserved_gib=torch.cuda.max_memory_reserved() / 2**30)
    compiled = f", compile {result['compile_s']:.1f} s" if a.compile else ""
    edit = f" {a.reference_images} refs" if a.reference_images else ""
    print(f"diffusers {MODELS[a.model]['name']}{edit} {result['mode']}: median {result['median_ms']:.3f} ms/step  "
          f"(min {result['min_ms']:.3f}, max {result['max_ms']:.3f}, {len(times)} runs after "
          f"{a.warmup} warmup{compiled}), peak {result['peak_gib']:.2f} GiB", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="torch.compile (default mode, fullgraph=False)")
    ap.add_argument("--regional", action="store_true",
                    help="with --compile: compile only the repeated blocks (compile_repeated_blocks)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--image-tokens", type=int, default=4096, help="4096 = 1024x1024")
    ap.add_argument("--text-tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference-images", type=int, default=0,
                    help="flux2: FLUX.2 editing with N reference images (0..10), as Flux2Pipeline; "
                         "qwenimage: Qwen-Image-Edit-2509 with N input images (0..3), as "
                         "QwenImageEditPlusPipeline")
    ap.add_argument("--reference-size", default="1024x1024",
                    help="each reference image, WIDTHxHEIGHT pixels (16 px a token)")
    ap.add_argument("--out", required=True, help="JSON file to write")
    a = ap.parse_args()
    if a.runs < 1 or a.warmup < 0:
        ap.error("--runs must be >= 1 and --warmup >= 0")
    if a.regional and not a.compile:
        ap.error("--regional needs --compile")
    if a.reference_images and a.model not in MAX_REFERENCES:
        ap.error("--reference-images is editing: --model flux2 (FLUX.2) or qwenimage (Qwen-Image-Edit-2509)")
    if not 0 <= a.reference_images <= MAX_REFERENCES.get(a.model, 0):
        ap.error(f"--reference-images must be in 0..{MAX_REFERENCES.get(a.model, 0)} for {a.model}")
    try:
        reference_grid(a.reference_size)
    except ValueError as e:
        ap.error(str(e))
    mode = ("compile-regional" if a.regional else "compile") if a.compile else "eager"
    result = dict(model=a.model, released=MODELS[a.model]["name"], cls=MODELS[a.model]["cls"], mode=mode,
                  compile=a.compile, batch=a.batch, image_tokens=a.image_tokens, text_tokens=a.text_tokens,
                  dtype="bfloat16", warmup=a.warmup, runs=a.runs, seed=a.seed,
                  reference_images=a.reference_images,
                  reference_size=a.reference_size if a.reference_images else None)
    rc = 0
    try:
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        run(a, result)
    except Exception as e:  # recorded for the table (an out-of-memory or a compile failure is a result)
        traceback.print_exc()
        first_line = (str(e).strip().splitlines() or [""])[0]
        result["error"] = f"{type(e).__name__}: {first_line}"
        print(f"diffusers {MODELS[a.model]['name']} {mode} failed: {result['error']}", flush=True)
        rc = 1
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
