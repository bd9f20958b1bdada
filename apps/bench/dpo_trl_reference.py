"""TRL's DPOTrainer on the model directory and pairs bench_post_training gives our train_llama
--mode dpo: the same weights, tokenizer, data, batch, learning rate and steps, on the CPU, with
the reference log-probabilities precomputed once (precompute_ref_log_probs, as ours does). Prints
one JSON line: the median seconds per step after a warm-up, pairs per second, peak RSS."""
import argparse
import json
import resource
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--pairs", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max_length", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    rows = [json.loads(line) for line in open(a.pairs)]
    data = Dataset.from_list(rows[: a.batch * (a.steps + 2)])
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(a.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    times = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

    cfg = DPOConfig(output_dir=a.out, per_device_train_batch_size=a.batch, max_steps=a.steps, learning_rate=a.lr,
                    beta=a.beta, max_length=a.max_length, precompute_ref_log_probs=True, use_cpu=True,
                    report_to="none", save_strategy="no", logging_steps=1000, dataloader_num_workers=0,
                    lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.1, adam_beta2=0.95,
                    remove_unused_columns=False, disable_tqdm=True, seed=0,
                    # fp32 as ours: TRL's default is bf16 autocast, which a CPU without native
                    # bf16 (AMD Zen 3) emulates at ~1/40 of the fp32 rate.
                    bf16=False)
    trainer = DPOTrainer(model=model, args=cfg, train_dataset=data, processing_class=tok, callbacks=[Clock()])
    trainer.train()
    step = statistics.median(times[1:]) if len(times) > 1 else times[0]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # GiB
    print(json.dumps({"step_s": step, "pairs_per_s": a.batch / step, "peak_gib": peak, "steps": len(times)}))


if __name__ == "__main__":
    main()
