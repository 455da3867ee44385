#!/usr/bin/env python3
"""Released-size FLUX.2-dev, Qwen-Image and Qwen-Image-Edit-2509 pipelines with random weights, for
the end-to-end benchmarks on the GPU host (scripts/gpu-bench.sh stage 8, stage 13's FLUX.2 editing,
stage 18's Qwen-Image-Edit), and diffusers' side of them.

  write --family flux2|qwenimage|qwenimage_edit --out DIR [--fixtures tests/fixtures]
      Builds every component at its released size (diffusers' and transformers' own defaults for
      the transformer and the VAE; FLUX.2-dev's Mistral-Small-3.1-24B / Qwen-Image's Qwen2.5-VL-7B
      text and vision configs), with random bf16 weights made on the GPU, and saves them in
      diffusers' layout (5 GB safetensors shards). The tokenizer, scheduler and model_index.json
      are the repository's tiny fixture's (made by tests/fixtures/make_fixtures.py with the real
      libraries): the tokenizer's vocabulary is small, which changes no shape the benchmark times.
      qwenimage_edit is Qwen/Qwen-Image-Edit-2509's layout (QwenImageEditPlusPipeline): Qwen-Image's
      transformer, text encoder (with its Qwen2.5-VL-7B vision tower under "visual.") and VAE (with
      its encoder: diffusers' AutoencoderKLQwenImage always has one), and a processor/ of the tiny
      tokenizer's files plus Qwen2.5-VL's preprocessor_config.json (Qwen2VLImageProcessor: patch 14,
      temporal patch 2, merge 2, min_pixels 3136, max_pixels 12845056, CLIP mean / std).
  run --family flux2|qwenimage --dir DIR [--steps N] [--size 1024]
      diffusers' Flux2Pipeline / QwenImagePipeline from DIR (each component loaded straight to the
      GPU), one 2-step warm-up call, then one timed call: load, text encoding, denoising (per step),
      VAE decode, total, and peak GPU memory, as one line per quantity.
  run --family flux2 --dir DIR --image A.png [--image B.png ...] [--reference-counts 1 3]
      FLUX.2 editing (Flux2Pipeline's `image=`): the pipeline loaded once, then for each count k of
      --reference-counts (default: all the images) a 2-step warm-up call and one timed call with
      the first k images as references, at --size (the output's; the references keep their own,
      1024x1024 files stay 1024x1024), each block as above plus image_encode
      (prepare_image_latents: the references through the VAE encoder).
  run --family qwenimage_edit --dir DIR --image A.png [--image B.png ...] [--reference-counts 1 2]
      Qwen-Image-Edit-2509 (QwenImageEditPlusPipeline, `image=` a list of the first k images, at
      most 3), the same way, with negative_prompt " " and true_cfg_scale 4 (the model card's): the
      pipeline sizes each image to ~384x384 for the prompt's vision tokens and ~1024x1024 for the
      VAE; text_encode is encode_prompt (prompt and negative prompt, each with the images through
      the processor and the vision tower), image_encode _encode_vae_image (each image through the
      VAE encoder). transformers 5.17 wants the processor's mm_token_type_ids for a prompt with
      images, which diffusers 58eb52c does not pass: a forward pre-hook on the text encoder adds
      them (1 on <|image_pad|>, 0 elsewhere: what the processor returns), as
      tests/fixtures/make_qwen_edit_fixtures.py does; the line says whether it did.
  images --out DIR [--count 3] [--size 1024]
      COUNT seeded RGB PNGs of SIZE x SIZE (smooth content plus noise, as make_image_fixtures.py's
      inputs), ref-0.png ...: the editing benchmark's reference images, read by both sides.

Needs torch, transformers and diffusers' source on PYTHONPATH (the GPU host has the first two;
carry diffusers, see scripts/gpu-bench.sh)."""
import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

MISTRAL_SMALL_31_TEXT = dict(hidden_size=5120, intermediate_size=32768, num_hidden_layers=40,
                             num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                             vocab_size=131072, rms_norm_eps=1e-5, max_position_embeddings=131072)
PIXTRAL_VISION = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                      num_attention_heads=16, head_dim=64, image_size=1540, patch_size=14)
QWEN25_VL_7B_TEXT = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                         num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                         rms_norm_eps=1e-6, max_position_embeddings=128000)
QWEN25_VL_7B_VISION = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                           out_hidden_size=3584, fullatt_block_indexes=[7, 15, 23, 31])
QWEN25_VL_MROPE = [16, 24, 24]
# Qwen2.5-VL's preprocessor_config.json (as Qwen/Qwen-Image-Edit-2509's processor/ has it).
QWEN25_VL_PREPROCESSOR = {
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
    "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
}
FAMILIES = ["flux2", "qwenimage", "qwenimage_edit"]
# QwenImageEditPlusPipeline's input images per call in ditserve (QwenImagePipeline::kMaxEditImages).
MAX_EDIT_IMAGES = 3


def tiny_folder(fixtures, family):
    return Path(fixtures) / ("flux2-tiny" if family == "flux2" else "qwenimage-tiny")


def write_edit_parts(tiny, out):
    """Qwen-Image-Edit-2509's model_index.json (the tiny Qwen-Image one with the edit pipeline's
    class and its processor; keys sorted, indent 2, as save_pretrained) and processor/."""
    index = json.loads((tiny / "model_index.json").read_text())
    index["_class_name"] = "QwenImageEditPlusPipeline"
    index["processor"] = ["transformers", "Qwen2VLProcessor"]
    (out / "model_index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    shutil.copytree(tiny / "tokenizer", out / "processor")
    (out / "processor" / "preprocessor_config.json").write_text(
        json.dumps(QWEN25_VL_PREPROCESSOR, indent=2) + "\n")


def text_encoder_config(family, tiny):
    """The tiny fixture's config (its special-token ids) with the released model's sizes."""
    cfg = json.loads((tiny / "text_encoder" / "config.json").read_text())
    text, vision = cfg["text_config"], cfg["vision_config"]
    text.pop("layer_types", None)  # recomputed for the new layer count
    if family == "flux2":
        text.update(MISTRAL_SMALL_31_TEXT)
        vision.update(PIXTRAL_VISION)
    else:
        text.update(QWEN25_VL_7B_TEXT)
        vision.update(QWEN25_VL_7B_VISION)
        rope = text.get("rope_parameters") or text.get("rope_scaling")
        rope["mrope_section"] = QWEN25_VL_MROPE
    cfg["dtype"] = "bfloat16"
    return cfg


def save(module, folder, report):
    t0 = time.perf_counter()
    module.save_pretrained(folder, max_shard_size="5GB", safe_serialization=True)
    n = sum(p.numel() for p in module.parameters())
    size = sum(f.stat().st_size for f in Path(folder).glob("*.safetensors"))
    report(f"{Path(folder).name}: {n / 1e9:.2f} B parameters, {size / 1e9:.2f} GB written in "
           f"{time.perf_counter() - t0:.1f} s")


def write(a):
    import transformers
    from diffusers import (AutoencoderKLFlux2, AutoencoderKLQwenImage, Flux2Transformer2DModel,
                           QwenImageTransformer2DModel)

    report = lambda s: print(s, flush=True)  # noqa: E731
    tiny, out = tiny_folder(a.fixtures, a.family), Path(a.out)
    out.mkdir(parents=True)
    for sub in ("tokenizer", "scheduler"):
        shutil.copytree(tiny / sub, out / sub)
    if a.family == "qwenimage_edit":
        write_edit_parts(tiny, out)
    else:
        shutil.copy(tiny / "model_index.json", out / "model_index.json")
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"), torch.no_grad():
        # Released sizes are the libraries' defaults for the transformers and the VAEs.
        tr = Flux2Transformer2DModel() if a.family == "flux2" else QwenImageTransformer2DModel()
        save(tr, out / "transformer", report)
        del tr
        torch.cuda.empty_cache()
        cfg = text_encoder_config(a.family, tiny)
        (out / "text_encoder").mkdir()
        (out / "text_encoder" / "config.json").write_text(json.dumps(cfg, indent=2))
        config = transformers.AutoConfig.from_pretrained(out / "text_encoder")
        cls = getattr(transformers, cfg["architectures"][0])
        te = cls._from_config(config, torch_dtype=torch.bfloat16).eval()
        save(te, out / "text_encoder", report)
        del te
        torch.cuda.empty_cache()
        vae = AutoencoderKLFlux2() if a.family == "flux2" else AutoencoderKLQwenImage()
        save(vae, out / "vae", report)


def images(a):
    import numpy as np
    from PIL import Image

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for i in range(a.count):
        rng = np.random.default_rng(100 + i)
        coarse = rng.integers(0, 256, size=(max(2, a.size // 24), max(2, a.size // 24), 3), dtype=np.uint8)
        img = Image.fromarray(coarse, "RGB").resize((a.size, a.size), Image.BICUBIC)
        arr = np.asarray(img).astype(np.int16) + rng.integers(-12, 13, size=(a.size, a.size, 3))
        path = out / f"ref-{i}.png"
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB").save(path, "PNG")
        print(f"{path}: {a.size}x{a.size}, {path.stat().st_size} bytes", flush=True)


class Clock:
    """Wall times of the pipeline's stages, taken at the stage edges with the GPU synchronized."""

    def __init__(self):
        self.marks = {}

    def wrap(self, obj, attr, name):
        fn = getattr(obj, attr)

        def timed(*args, **kwargs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            r = fn(*args, **kwargs)
            torch.cuda.synchronize()
            self.marks[name] = self.marks.get(name, 0.0) + time.perf_counter() - t0
            return r

        setattr(obj, attr, timed)


def load_processor(folder):
    """Qwen2VLProcessor from processor/ as the pipeline loads it; when that transformers cannot
    (tokenizer files + preprocessor_config.json only), built from its parts, as
    tests/fixtures/make_qwen_edit_fixtures.py's build_processor falls back."""
    import transformers

    try:
        return transformers.Qwen2VLProcessor.from_pretrained(folder), "from_pretrained"
    except Exception as e:  # noqa: BLE001
        first = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
    image_processor = transformers.AutoImageProcessor.from_pretrained(folder)
    tokenizer = transformers.Qwen2Tokenizer.from_pretrained(folder)
    return (transformers.Qwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer),
            f"built from AutoImageProcessor + Qwen2Tokenizer (from_pretrained failed: {first[:200]})")


def add_mm_token_type_ids(pipe):
    """A forward pre-hook on the text encoder adding mm_token_type_ids (1 on the image pads) to a
    call with images that lacks them (diffusers 58eb52c passes input_ids, attention_mask,
    pixel_values and image_grid_thw only; transformers 5.17's Qwen2-VL family then refuses the
    call). Returns the list the hook appends to on each injection."""
    import inspect

    te = pipe.text_encoder
    injected = []
    params = inspect.signature(te.forward).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if "mm_token_type_ids" not in params and not takes_kwargs:
        return None  # a transformers that derives the positions from input_ids alone
    image_token_id = int(te.config.image_token_id)

    def pre(module, args, kwargs):
        has_images = kwargs.get("pixel_values") is not None or kwargs.get("image_grid_thw") is not None
        ids = kwargs.get("input_ids")
        if has_images and kwargs.get("mm_token_type_ids") is None and ids is not None:
            kwargs = dict(kwargs, mm_token_type_ids=(ids == image_token_id).to(torch.int32))
            injected.append(True)
        return args, kwargs

    te.register_forward_pre_hook(pre, with_kwargs=True)
    return injected


def run(a):
    import diffusers
    import transformers

    d = Path(a.dir)
    index = json.loads((d / "model_index.json").read_text())
    t0 = time.perf_counter()
    parts = {}
    for name, entry in index.items():
        if name.startswith("_") or not isinstance(entry, list) or entry[0] is None:
            continue
        lib, cls_name = entry
        cls = getattr(diffusers if lib == "diffusers" else transformers, cls_name)
        kwargs = {}
        if name in ("transformer", "text_encoder", "vae"):
            kwargs = dict(torch_dtype=torch.bfloat16, device_map="cuda")
        if name == "processor" and cls_name == "Qwen2VLProcessor":
            parts[name], how = load_processor(d / name)
            print(f"processor: {how}", flush=True)
            continue
        parts[name] = cls.from_pretrained(d / name, **kwargs)
    pipe = getattr(diffusers, index["_class_name"])(**parts)
    torch.cuda.synchronize()
    load_s = time.perf_counter() - t0
    pipe.set_progress_bar_config(disable=True)
    injected = add_mm_token_type_ids(pipe) if a.family == "qwenimage_edit" else None

    base = dict(prompt="a lighthouse on a cliff at dawn", height=a.size, width=a.size)
    if a.family in ("qwenimage", "qwenimage_edit"):
        base.update(negative_prompt=" ", true_cfg_scale=4.0)
    refs = []
    if a.image:
        from diffusers.utils import load_image

        refs = [load_image(f) for f in a.image]  # as a user loads them (PIL, RGB)
    counts = (a.reference_counts or [len(refs)]) if refs else [0]
    step_ends = []

    def on_step(p, i, t, cb_kwargs):
        torch.cuda.synchronize()
        step_ends.append(time.perf_counter())
        return cb_kwargs

    clock = Clock()
    clock.wrap(pipe, "encode_prompt", "text_encode")
    clock.wrap(pipe.vae, "decode", "vae_decode")
    if refs:
        # Flux2Pipeline: the references through the VAE encoder in prepare_image_latents;
        # QwenImageEditPlusPipeline: each image's _encode_vae_image inside prepare_latents.
        clock.wrap(pipe, "_encode_vae_image" if a.family == "qwenimage_edit" else "prepare_image_latents",
                   "image_encode")
    for k in counts:
        kw = dict(base, image=refs[:k]) if k else base
        with torch.no_grad():
            pipe(**kw, num_inference_steps=2, generator=torch.Generator("cuda").manual_seed(0))
            clock.marks.clear()
            step_ends.clear()
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.synchronize()
            t_start = time.perf_counter()
            pipe(**kw, num_inference_steps=a.steps, generator=torch.Generator("cuda").manual_seed(0),
                 callback_on_step_end=on_step)
            torch.cuda.synchronize()
            total = time.perf_counter() - t_start
        steps = [b - e for e, b in zip(step_ends, step_ends[1:])]
        denoise = step_ends[-1] - step_ends[0] + (statistics.median(steps) if steps else 0.0)
        editing = ""
        if k:
            sizes = ", ".join(f"{r.size[0]}x{r.size[1]}" for r in refs[:k])
            kind = "input" if a.family == "qwenimage_edit" else "reference"
            editing = f", {k} {kind} image{'s' if k > 1 else ''} ({sizes})"
        if injected is not None:
            editing += f", mm_token_type_ids added by the hook in {len(injected)} text-encoder calls"
            injected.clear()
        elif a.family == "qwenimage_edit":
            editing += ", the text encoder takes no mm_token_type_ids (no hook)"
        print(f"diffusers {index['_class_name']} {a.size}x{a.size}{editing}, {a.steps} steps, bf16, "
              f"diffusers {diffusers.__version__}, transformers {transformers.__version__}, "
              f"torch {torch.__version__}")
        print(f"  load (from_pretrained, device_map=cuda): {load_s:.1f} s")
        print(f"  text_encode: {clock.marks.get('text_encode', 0) * 1e3:.0f} ms")
        if k:
            print(f"  image_encode: {clock.marks.get('image_encode', 0) * 1e3:.0f} ms")
        print(f"  denoise: {denoise * 1e3:.0f} ms ({statistics.median(steps) * 1e3:.1f} ms a step, median)")
        print(f"  vae_decode: {clock.marks.get('vae_decode', 0) * 1e3:.0f} ms")
        print(f"  total: {total * 1e3:.0f} ms")
        print(f"  peak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB allocated, "
              f"{torch.cuda.max_memory_reserved() / 2**30:.2f} GiB reserved", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--family", choices=FAMILIES, required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--fixtures", default=str(Path(__file__).resolve().parent.parent / "tests" / "fixtures"))
    r = sub.add_parser("run")
    r.add_argument("--family", choices=FAMILIES, required=True)
    r.add_argument("--dir", required=True)
    r.add_argument("--steps", type=int, default=50)
    r.add_argument("--size", type=int, default=1024)
    r.add_argument("--image", action="append", default=[],
                   help="flux2: a reference image file (repeatable, in order): FLUX.2 editing; "
                        "qwenimage_edit: an input image (1..3): Qwen-Image-Edit-2509")
    r.add_argument("--reference-counts", type=int, nargs="+", default=None,
                   help="with --image: time editing with the first K images for each K (default: all)")
    i = sub.add_parser("images")
    i.add_argument("--out", required=True)
    i.add_argument("--count", type=int, default=3)
    i.add_argument("--size", type=int, default=1024)
    a = ap.parse_args()
    if a.cmd == "run" and a.family == "qwenimage_edit" and not a.image:
        ap.error("--family qwenimage_edit needs --image (QwenImageEditPlusPipeline edits images)")
    if a.cmd == "run" and a.image:
        if a.family == "qwenimage":
            ap.error("--image is editing: --family flux2 or qwenimage_edit")
        if a.family == "qwenimage_edit" and any(k > MAX_EDIT_IMAGES for k in a.reference_counts or [len(a.image)]):
            ap.error(f"--family qwenimage_edit: at most {MAX_EDIT_IMAGES} images a call")
        if any(k < 1 or k > len(a.image) for k in a.reference_counts or []):
            ap.error(f"--reference-counts: each in 1..{len(a.image)} (the --image files given)")
    elif a.cmd == "run" and a.reference_counts:
        ap.error("--reference-counts needs --image")
    {"write": write, "run": run, "images": images}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
