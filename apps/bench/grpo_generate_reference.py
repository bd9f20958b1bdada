"""transformers' generate on the prompt tokens bench_post_training gives our rollout engine: each
round is one GRPO step's completions (--prompts prompts, --generations samples each, of
--completion tokens at temperature 1, no top-k or top-p), as TRL's GRPOTrainer produces them
without vLLM (model.generate with num_return_sequences). EOS is suppressed (min_new_tokens), so
every completion has the full length and both sides do the same work. Prints one JSON line: the
median seconds per round after the first."""
import argparse
import json
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt_ids", required=True, help="JSON list of token-id lists, --prompts per round")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--completion", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    ids = json.load(open(a.prompt_ids))
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    times = []
    for start in range(0, len(ids) - a.prompts + 1, a.prompts):
        batch = ids[start:start + a.prompts]
        width = max(len(p) for p in batch)
        # Left padding, as decoder-only generation needs.
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        torch.manual_seed(start)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, num_return_sequences=a.generations, max_new_tokens=a.completion,
                                 min_new_tokens=a.completion, pad_token_id=pad)
        times.append(time.perf_counter() - t0)
        assert out.shape == (a.prompts * a.generations, width + a.completion), out.shape
    round_s = statistics.median(times[1:]) if len(times) > 1 else times[0]
    print(json.dumps({"round_s": round_s, "tokens_per_s": a.prompts * a.generations * a.completion / round_s,
                      "rounds": len(times)}))


if __name__ == "__main__":
    main()
