"""The score-modifier shapes in torch 2.x on the CPU, the peers
users of Gemma 2 or gpt-oss would pick instead of mhagen:

- flex_attention under torch.compile, with a score_mod (softcap) and a
  sliding-window block mask; gpt-oss's sink as one extra key of value 0
  that every query sees and whose score_mod returns the head's sink
  (torch 2.15 cannot compile flex_attention's return_lse on the CPU, the
  other way FlexAttention users add a sink: out * sigmoid(lse - sink));
- "eager": the same math written out with an explicit float mask, scores
  materialised (what transformers' eager attention does);
- SDPA with the explicit float mask (window only: SDPA cannot cap scores
  or take a sink, so this is a lower bound on what the mask alone costs).

Shapes (bench/AttentionBench.cpp, kGemma2 / kGptOss / kStreaming): f32.
Gemma2: prefill of 2048 tokens, h 8, kv 4, dk 256, window 4096, softcap
50. GptOss: 2048 tokens, h 64, kv 8, dk 64, window 128, learned sinks.
Streaming: 4096 tokens, h 32, kv 8, dk 128, the mask union
causal & (window(1024) | sink(4)) (StreamingLLM's first four keys beside
the window; flex_attention's mask_mod is the same union, and its block
mask skips the blocks it hides). Windows follow mhagen's rule
(docs/design.md §2): key j visible from query i when i - W < j <= i.
flex_attention and eager are checked against each other before timing.
Run by bench/run_peers.sh (shape names Gemma2 GptOss); bench only.
"""
import math
import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from torch_sdpa import emit, measure

SHAPES = {
    # name: (B, T, h, kv, dk, window, softcap, sinks, first keys kept)
    "Gemma2": (1, 2048, 8, 4, 256, 4096, 50.0, False, 0),
    "GptOss": (1, 2048, 64, 8, 64, 128, None, True, 0),
    "Streaming": (1, 4096, 32, 8, 128, 1024, None, False, 4),
}


def visible_pairs(t, window, first):
    # The window, plus the first keys the window no longer covers.
    return sum(min(i + 1, window) + max(0, min(first, i - window + 1))
               for i in range(t))


def window_mask(t, window, first):
    i = torch.arange(t).unsqueeze(1)
    j = torch.arange(t).unsqueeze(0)
    return (j <= i) & ((j > i - window) | (j < first))


def eager(q, k, v, visible, scale, softcap, sinks):
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s + torch.where(visible, 0.0, float("-inf"))
    if sinks is not None:
        col = sinks.view(1, -1, 1, 1).expand(s.shape[0], -1, s.shape[2], 1)
        p = torch.softmax(torch.cat([s, col], dim=-1), dim=-1)[..., :-1]
    else:
        p = torch.softmax(s, dim=-1)
    return p @ v


def main(argv):
    only = set(argv[1:])
    peer = {"torch": torch.__version__}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for name, (B, t, h, kv, dk, window, softcap, has_sinks,
                   first) in SHAPES.items():
            if only and name not in only:
                continue
            g = torch.Generator().manual_seed(1)
            q = torch.randn(B, h, t, dk, generator=g)
            k = torch.randn(B, kv, t, dk, generator=g)
            v = torch.randn(B, kv, t, dk, generator=g)
            sinks = torch.randn(h, generator=g) if has_sinks else None
            scale = 1.0 / math.sqrt(dk)
            visible = window_mask(t, window, first)
            float_mask = torch.where(visible, 0.0, float("-inf"))

            # With a sink: key t (one past the last) has value 0, every
            # query sees it, and its score is the head's sink.
            tk = t + 1 if has_sinks else t
            kf = torch.cat([k, torch.zeros(B, kv, 1, dk)], 2) if has_sinks else k
            vf = torch.cat([v, torch.zeros(B, kv, 1, dk)], 2) if has_sinks else v

            def mask_mod(b, hh, qi, kj):
                inside = (kj <= qi) & ((kj > qi - window) | (kj < first))
                return inside | (kj == t) if has_sinks else inside

            def score_mod(s, b, hh, qi, kj):
                if softcap:
                    s = softcap * torch.tanh(s / softcap)
                if has_sinks:
                    s = torch.where(kj == t, sinks[hh], s)
                return s

            block = create_block_mask(mask_mod, None, None, t, tk, device="cpu")
            flex = torch.compile(flex_attention)

            def run_flex():
                return flex(q, kf, vf, score_mod=score_mod, block_mask=block,
                            scale=scale, enable_gqa=True)

            def run_eager():
                return eager(q, k, v, visible, scale, softcap, sinks)

            def run_sdpa():
                return torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, attn_mask=float_mask, scale=scale, enable_gqa=True)

            with torch.no_grad():
                err = (run_flex() - run_eager()).abs().max().item()
                if not err < 1e-3:
                    print(f"{name}: flex_attention and eager disagree by {err}",
                          file=sys.stderr)
                    sys.exit(1)
                flops = 4.0 * B * h * dk * visible_pairs(t, window, first)
                kv_bytes = 2 * B * t * kv * dk * 4
                for label, fn in (("torch_flex_attention", run_flex),
                                  ("torch_eager_float_mask", run_eager),
                                  ("torch_sdpa_float_mask_no_modifier", run_sdpa)):
                    emit(dict(peer, peer=label), name, "f32", threads,
                         measure(fn), flops, kv_bytes)


if __name__ == "__main__":
    main(sys.argv)
