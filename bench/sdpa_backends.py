#!/usr/bin/env python3
"""Times PyTorch's scaled-dot-product-attention backends on the attention shapes of the served
models (bf16, batch 1, 1024x1024 image = 4096 image tokens + 512 text tokens), to pick the
worker's --attention-backend. Run on the GPU host: python3 bench/sdpa_backends.py"""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = {  # name: (heads, head_dim, tokens)
    "flux1": (24, 128, 4608),
    "flux2": (48, 128, 4608),
    "qwenimage": (24, 128, 4608),
}
BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def time_ms(fn, reps=20):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main():
    torch.manual_seed(0)
    print(torch.__version__, torch.cuda.get_device_name(0), "cudnn", torch.backends.cudnn.version())
    for name, (heads, hd, s) in SHAPES.items():
        q, k, v = (torch.randn(1, s, heads, hd, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
                   for _ in range(3))
        flops = 4 * s * s * hd * heads
        ref = None
        for bname, backend in BACKENDS.items():
            try:
                with sdpa_kernel(backend):
                    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
                    ms = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))
            except RuntimeError as e:
                print(f"{name:10s} {bname:10s} unavailable: {str(e).splitlines()[0][:100]}")
                continue
            ref = out if ref is None else ref
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            print(f"{name:10s} {bname:10s} {ms:7.3f} ms  {flops / ms / 1e9:6.1f} TFLOP/s  rel.diff vs first {err:.2e}")
        with sdpa_kernel(list(BACKENDS.values())):
            ms = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))
        print(f"{name:10s} {'default':10s} {ms:7.3f} ms")


if __name__ == "__main__":
    main()
