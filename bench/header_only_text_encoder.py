#!/usr/bin/env python3
"""Writes FLUX.2-dev's text_encoder folder at its released size as a *sparse* checkpoint: a real
config.json and one safetensors file whose header lists every tensor of
Mistral3ForConditionalGeneration's text model (plus lm_head, which the loader skips) with the
released shapes, and whose data section is a hole (truncate). `ditserve-tool plan` reads headers
only, so this gives the per-rank weight bytes of the sharded text encoder without 48 GB of weights.

Usage: bench/header_only_text_encoder.py OUT_DIR   (then: ditserve-tool plan --model OUT_DIR ...)"""
import json
import os
import struct
import sys

H, FF, HEADS, KV, HD, LAYERS, VOCAB = 5120, 32768, 32, 8, 128, 40, 131072


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    config = {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
              "text_config": {"model_type": "mistral", "hidden_size": H, "intermediate_size": FF,
                              "num_attention_heads": HEADS, "num_key_value_heads": KV,
                              "head_dim": HD, "num_hidden_layers": LAYERS, "rms_norm_eps": 1e-5,
                              "rope_theta": 1e9, "vocab_size": VOCAB,
                              "max_position_embeddings": 131072, "sliding_window": None},
              "vision_config": {"model_type": "pixtral"}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    p = "model.language_model."
    shapes = {p + "embed_tokens.weight": [VOCAB, H], p + "norm.weight": [H], "lm_head.weight": [VOCAB, H]}
    for i in range(LAYERS):
        l = f"{p}layers.{i}."
        shapes.update({l + "input_layernorm.weight": [H], l + "post_attention_layernorm.weight": [H],
                       l + "self_attn.q_proj.weight": [HEADS * HD, H],
                       l + "self_attn.k_proj.weight": [KV * HD, H],
                       l + "self_attn.v_proj.weight": [KV * HD, H],
                       l + "self_attn.o_proj.weight": [H, HEADS * HD],
                       l + "mlp.gate_proj.weight": [FF, H], l + "mlp.up_proj.weight": [FF, H],
                       l + "mlp.down_proj.weight": [H, FF]})
    header, offset = {}, 0
    for name in sorted(shapes):
        n = 1
        for d in shapes[name]:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shapes[name], "data_offsets": [offset, offset + 2 * n]}
        offset += 2 * n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path = os.path.join(out, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(8 + len(text) + offset)
    print(f"{path}: {len(shapes)} tensors, {offset / 1e9:.2f} GB of (sparse) data")


if __name__ == "__main__":
    main()
