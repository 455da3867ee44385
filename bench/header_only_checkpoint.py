#!/usr/bin/env python3
"""Released-size transformer checkpoints without their weights, for `ditserve-tool plan` (which
reads safetensors headers only): the weight bytes per rank of FLUX.1-dev, FLUX.2-dev and
Qwen-Image at any tensor-parallel degree, ours against the reference's plan, without 24-64 GB of
weights per model.

  shapes OUT_DIR
      Builds each transformer with diffusers on PyTorch's meta device (no memory, no weights) from
      diffusers' own defaults for the released model (FLUX.1-dev: FluxTransformer2DModel's defaults
      with guidance_embeds=True; FLUX.2-dev: Flux2Transformer2DModel(); Qwen-Image:
      QwenImageTransformer2DModel()) and writes OUT_DIR/<model>.json = {"config": the model's
      config as save_pretrained writes it, "tensors": {name: shape}}. Needs torch and diffusers'
      source on PYTHONPATH (the GPU host's CPU; scripts/gpu-bench.sh carries diffusers).
  write SHAPES_JSON OUT_DIR
      Writes OUT_DIR/config.json and OUT_DIR/diffusion_pytorch_model.safetensors: a real bf16
      header listing every tensor, and a data section that is a hole (a sparse file). Standard
      library only.

The tensor lists of the three released models are committed in bench/results/shapes/ (made by
`shapes` with diffusers); README's memory table comes from
  python3 bench/header_only_checkpoint.py write bench/results/shapes/MODEL.json /tmp/MODEL
  build/tools/ditserve-tool plan --model /tmp/MODEL --tp N --dtype bf16 [--replicate-modulation]"""
import json
import math
import os
import struct
import sys


def shapes(out):
    import torch
    from diffusers import (Flux2Transformer2DModel, FluxTransformer2DModel,
                           QwenImageTransformer2DModel)

    models = {"flux1-dev": (FluxTransformer2DModel, {"guidance_embeds": True}),
              "flux2-dev": (Flux2Transformer2DModel, {}),
              "qwen-image": (QwenImageTransformer2DModel, {})}
    os.makedirs(out, exist_ok=True)
    for name, (cls, kwargs) in models.items():
        with torch.device("meta"):
            model = cls(**kwargs)
        config = {k: v for k, v in dict(model.config).items() if not k.startswith("_")}
        config["_class_name"] = cls.__name__
        tensors = {k: list(v.shape) for k, v in model.state_dict().items()}
        with open(os.path.join(out, f"{name}.json"), "w") as f:
            json.dump({"config": config, "tensors": tensors}, f, indent=0, sort_keys=True)
        n = sum(math.prod(s) for s in tensors.values())
        print(f"{name}: {cls.__name__}, {len(tensors)} tensors, {n / 1e9:.2f} B parameters")


def write(shapes_json, out):
    with open(shapes_json) as f:
        spec = json.load(f)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(spec["config"], f, indent=1)
    header, offset = {}, 0
    for name in sorted(spec["tensors"]):
        shape = spec["tensors"][name]
        nbytes = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path = os.path.join(out, "diffusion_pytorch_model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(8 + len(text) + offset)  # the data: a hole
    print(f"{path}: {len(header)} tensors, {offset / 1e9:.2f} GB of bf16 weights (sparse)")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "shapes":
        shapes(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
