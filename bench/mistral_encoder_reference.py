#!/usr/bin/env python3
"""transformers' side of the FLUX.2 text-encoder benchmark: the text model of
Mistral-Small-3.1-24B-Instruct-2503 (FLUX.2-dev's text_encoder) at its released size with random
weights, bf16 on the GPU, encoding one left-padded prompt of --tokens tokens the way diffusers'
Flux2Pipeline calls it (output_hidden_states=True, use_cache=False; the pipeline keeps hidden
states 10, 20 and 30). Prints the median of --runs timed forwards after --warmup.

Run beside build-cuda/bench/ditserve-mistral-encoder-bench in the same device call."""
import argparse
import statistics
import time

import torch
from transformers import MistralConfig, MistralModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    config = MistralConfig(hidden_size=5120, intermediate_size=32768, num_attention_heads=32,
                           num_key_value_heads=8, head_dim=128, num_hidden_layers=a.layers,
                           rms_norm_eps=1e-5, rope_theta=1e9, vocab_size=131072,
                           max_position_embeddings=131072, sliding_window=None)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = MistralModel._from_config(config, torch_dtype=torch.bfloat16).eval()
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, config.vocab_size, (1, a.tokens), device="cuda")
    mask = torch.ones(1, a.tokens, dtype=torch.int64, device="cuda")
    mask[:, : a.tokens // 2] = 0
    times = []
    with torch.no_grad():
        for i in range(a.warmup + a.runs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
            torch.stack([out.hidden_states[k] for k in (10, 20, 30)], dim=1)
            torch.cuda.synchronize()
            if i >= a.warmup:
                times.append((time.perf_counter() - t0) * 1e3)
    print(f"transformers MistralModel: {a.layers} layers, {params} params, {a.tokens} tokens: "
          f"median {statistics.median(times):.2f} ms (min {min(times):.2f}, max {max(times):.2f}, "
          f"{len(times)} runs)")


if __name__ == "__main__":
    main()
