#!/usr/bin/env python3
"""Reference cases for qwen2vl_image_processor_test: what transformers' Qwen2VLProcessor (the `processor`
of diffusers' QwenImageEditPlusPipeline, 58eb52c0) does with the pipeline's condition images, run with
transformers 5.17.0, torch and torchvision (the GPU host's image: python3 there has them; CPU only).

    python3 tests/unit/data/make_qwen2vl_cases.py OUT_FILE   (default tests/unit/data/qwen2vl_cases.txt)

The processor folder is assembled in a temporary folder from the tiny Qwen tokenizer of
tests/fixtures/qwenimage-tiny/tokenizer plus the preprocessor_config.json below, and loaded the way
diffusers loads the pipeline's `processor` (Qwen2VLProcessor.from_pretrained); it is called as
QwenImageEditPlusPipeline._get_qwen_prompt_embeds calls it (text=..., images=[...], padding=True,
return_tensors="pt").

One case a line (sources are rebuilt by the test from their formula, so only results are committed):
    meta <key> <value...>
    resize <source> <out_w> <out_h> <fnv64> [<hex of the RGB bytes, rows top to bottom>]
        the processor's resize to a given size: TorchvisionBackend.resize(image_processor, 1CHW uint8
        tensor, SizeDict(height=h, width=w), resample) (Qwen2VLImageProcessor.resize runs
        smart_resize first, then this), i.e. tvF.resize(..., BICUBIC, antialias=True)
    process <case> <n> <source>... grid <t> <h> <w> [<t> <h> <w>]... rows <r> cols <c> <fnv64>
        pixel_values (float32, row-major) of one call with n images; samples follow as
    sample <case> <row> <col> <float32 bits in hex>
    chain <source> cond <w> <h> vae <w> <h> out <w> <h>
        diffusers' calculate_dimensions for CONDITION_IMAGE_SIZE / VAE_IMAGE_SIZE and the output size
        default, then (as a process line named chain:<source>) the LANCZOS condition image through the
        processor.
<source> is pattern:WxH (make_preprocess_cases.py's formula image) or noise:WxH:SEED (an LCG, below).
<fnv64> is the 64-bit FNV-1a hash of the bytes (RGB rows, or float32 little-endian), in hex.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from PIL import Image
from transformers import Qwen2VLProcessor
from transformers.image_processing_backends import TorchvisionBackend
from transformers.image_utils import PILImageResampling, SizeDict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "qwenimage-tiny", "tokenizer")

# Qwen2.5-VL's preprocessor_config.json (the processor/ folder of the Qwen-Image-Edit checkpoints).
PREPROCESSOR_CONFIG = {
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2VLProcessor",
}


def pattern(w, h):
    im = Image.new("RGB", (w, h))
    im.putdata([((7 * x + 3 * y) & 255, (x * y) & 255, ((x >> 2) ^ (y >> 2)) & 255)
                for y in range(h) for x in range(w)])
    return im


def noise(w, h, seed):
    """Byte i of the RGB rows: bits 56..63 of the i-th step of Knuth's 64-bit LCG from `seed`."""
    s = seed
    out = bytearray(w * h * 3)
    for i in range(w * h * 3):
        s = (s * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        out[i] = s >> 56
    return Image.frombytes("RGB", (w, h), bytes(out))


def source(name):
    kind, rest = name.split(":", 1)
    if kind == "pattern":
        w, h = (int(v) for v in rest.split("x"))
        return pattern(w, h)
    size, seed = rest.split(":")
    w, h = (int(v) for v in size.split("x"))
    return noise(w, h, int(seed))


def fnv64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


# --- diffusers/pipelines/qwenimage/pipeline_qwenimage_edit_plus.py (58eb52c0) ---
CONDITION_IMAGE_SIZE = 384 * 384
VAE_IMAGE_SIZE = 1024 * 1024


def calculate_dimensions(target_area, ratio):
    width = math.sqrt(target_area * ratio)
    height = width / ratio
    width = round(width / 32) * 32
    height = round(height / 32) * 32
    return width, height


def load_processor(folder):
    try:
        return Qwen2VLProcessor.from_pretrained(folder)
    except Exception as e:  # noqa: BLE001 - report, then assemble it by hand
        print(f"Qwen2VLProcessor.from_pretrained failed: {type(e).__name__}: {e}", file=sys.stderr)
        from transformers import AutoImageProcessor, AutoTokenizer
        return Qwen2VLProcessor(image_processor=AutoImageProcessor.from_pretrained(folder),
                                tokenizer=AutoTokenizer.from_pretrained(folder))


RESIZES = [
    ("noise:31x23:1", 56, 56), ("noise:70x50:2", 56, 56), ("noise:100x40:3", 112, 28),
    ("noise:200x150:4", 84, 56), ("pattern:57x29", 28, 56), ("noise:5x3:5", 28, 28),
    ("noise:64x64:6", 28, 84), ("pattern:384x384", 392, 392), ("noise:480x320:7", 476, 308),
    ("pattern:1024x96", 1008, 84),
]
PROCESS = [
    ("one", ["noise:70x50:2"]),
    ("two", ["noise:100x40:3", "pattern:60x90"]),
    ("big", ["pattern:384x384"]),
]
CHAINS = ["noise:300x200:8", "pattern:200x300", "noise:100x100:9"]
PROMPT = "<|im_start|>user\n{}<|im_end|>\n"


def resize_lines(image_processor):
    lines = []
    for name, w, h in RESIZES:
        img = np.asarray(source(name), dtype=np.uint8)
        chw = torch.from_numpy(img.copy()).permute(2, 0, 1).contiguous()
        # Qwen2VLImageProcessor.resize(images, size, resample, factor) runs smart_resize, then
        # TorchvisionBackend.resize(image=..., size=SizeDict(height, width), resample=...): call
        # the latter directly with the target size.
        out = TorchvisionBackend.resize(image_processor, image=chw[None],
                                        size=SizeDict(height=h, width=w),
                                        resample=image_processor.resample)[0]
        data = out.permute(1, 2, 0).contiguous().numpy().tobytes()
        line = f"resize {name} {w} {h} {fnv64(data)}"
        if w * h <= 4096:
            line += " " + data.hex()
        lines.append(line)
    return lines


def process_lines(processor, case, names, images):
    text = PROMPT.format("".join(f"Picture {i + 1}: <|vision_start|><|image_pad|><|vision_end|>"
                                 for i in range(len(images))) + "edit")
    try:
        out = processor(text=[text], images=images, padding=True, return_tensors="pt")
    except Exception as e:  # noqa: BLE001 - report, then the image processor alone
        print(f"processor call failed: {type(e).__name__}: {e}", file=sys.stderr)
        out = processor.image_processor(images=images, return_tensors="pt")
    pv = out["pixel_values"]
    grid = out["image_grid_thw"].tolist()
    assert pv.dtype == torch.float32, pv.dtype
    data = pv.contiguous().numpy().astype("<f4").tobytes()
    rows, cols = pv.shape
    lines = [f"process {case} {len(images)} {' '.join(names)} grid "
             f"{' '.join(' '.join(str(v) for v in g) for g in grid)} rows {rows} cols {cols} {fnv64(data)}"]
    flat = pv.contiguous().view(-1).view(torch.int32)
    for k in range(24):
        r = (k * 7919) % rows
        c = (k * 104729 + r) % cols
        bits = int(flat[r * cols + c]) & 0xFFFFFFFF
        lines.append(f"sample {case} {r} {c} {bits:08x}")
    return lines


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "unit", "data",
                                                                   "qwen2vl_cases.txt")
    folder = tempfile.mkdtemp()
    try:
        for f in os.listdir(TOKENIZER):
            shutil.copy(os.path.join(TOKENIZER, f), folder)
        with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
            json.dump(PREPROCESSOR_CONFIG, f)
        processor = load_processor(folder)
        ip = processor.image_processor
        lines = [
            f"meta transformers {transformers.__version__}",
            f"meta torch {torch.__version__}",
            f"meta cpu_capability {torch.backends.cpu.get_cpu_capability()}",
            f"meta image_processor {type(ip).__module__}.{type(ip).__name__}",
            f"meta backend {getattr(ip, 'backend', '?')}",
            f"meta resample {int(ip.resample)}",
            f"meta size {dict(ip.size)}",
        ]
        lines += resize_lines(ip)
        for case, names in PROCESS:
            lines += process_lines(processor, case, names, [source(n) for n in names])
        for name in CHAINS:
            img = source(name)
            w, h = img.size
            cw, ch = calculate_dimensions(CONDITION_IMAGE_SIZE, w / h)
            vw, vh = calculate_dimensions(VAE_IMAGE_SIZE, w / h)
            ow, oh = calculate_dimensions(1024 * 1024, w / h)
            ow, oh = ow // 16 * 16, oh // 16 * 16
            lines.append(f"chain {name} cond {cw} {ch} vae {vw} {vh} out {ow} {oh}")
            # VaeImageProcessor.resize: image.resize((width, height), resample=LANCZOS, reducing_gap=None)
            cond = img.resize((cw, ch), resample=Image.Resampling.LANCZOS, reducing_gap=None)
            lines += process_lines(processor, f"chain:{name}", [name], [cond])
        if os.environ.get("ATEN_CPU_CAPABILITY") is None:
            # The same resizes on torch's portable (non-AVX) kernels: do both paths agree?
            env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
            probe = subprocess.run([sys.executable, os.path.abspath(__file__), "--resize-only"],
                                   env=env, capture_output=True, text=True, check=True).stdout.split("\n")
            mine = resize_lines(ip)
            same = [a.split()[4] == b.split()[4] for a, b in zip(mine, probe) if b]
            lines.append(f"meta default_capability_resizes_equal {all(same)} {sum(same)}/{len(same)}")
        try:
            from transformers import Qwen2VLImageProcessorPil
            pil = Qwen2VLImageProcessorPil(**{k: v for k, v in PREPROCESSOR_CONFIG.items()
                                              if k not in ("image_processor_type", "processor_class")})
            pv = pil(images=[source("noise:70x50:2")], return_tensors="np")["pixel_values"]
            lines.append(f"meta pil_backend_one {fnv64(pv.astype('<f4').tobytes())}")
        except Exception as e:  # noqa: BLE001 - informational only
            lines.append(f"meta pil_backend_one unavailable {type(e).__name__}")
    finally:
        shutil.rmtree(folder)
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--resize-only":
        folder = tempfile.mkdtemp()
        for f in os.listdir(TOKENIZER):
            shutil.copy(os.path.join(TOKENIZER, f), folder)
        with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
            json.dump(PREPROCESSOR_CONFIG, f)
        ip = load_processor(folder).image_processor
        shutil.rmtree(folder)
        print("\n".join(resize_lines(ip)))
    else:
        main()
