r"""Check that vLLM loads a model directory and decodes exactly as `transformers` does.

    python -m real.experiments.check_vllm --model traces/reference/model \
        [--problems 8] [--max-tokens 1024]

For a few GCD problems it compares, token for token, vLLM's greedy output (temperature 0,
stopping at </s>) with `real.tiny.generation.greedy_generate` (a batched argmax loop over
`transformers`), and vLLM's prompt token ids with ours. Prints one line per problem and a
last line of JSON; exits 1 on any difference. Starts a vLLM engine (~30 s on CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from real.tiny import task
from real.tiny.generation import greedy_generate
from real.tiny.model import load_model_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", required=True)
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--mix", default="hard", help="difficulty mix of the problems (hard: some long responses)"
    )
    ap.add_argument("--max-tokens", type=int, default=None)
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = str(load_model_dir(args.model))
    cap = args.max_tokens or task.MAX_RESPONSE_TOKENS
    probs = task.make_problems(args.problems, seed=args.seed, mix=args.mix, split="test")
    prompts = [p.prompt for p in probs]
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    t0 = time.perf_counter()
    hf = greedy_generate(model, tok, prompts, max_new_tokens=cap)
    t_hf = time.perf_counter() - t0

    from vllm import LLM, SamplingParams

    t0 = time.perf_counter()
    llm = LLM(
        model=d,
        dtype="float32",
        gpu_memory_utilization=0.3,
        max_model_len=2048,
        enforce_eager=True,
        seed=0,
    )
    t_start = time.perf_counter() - t0
    t0 = time.perf_counter()
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=cap), use_tqdm=False)
    t_vllm = time.perf_counter() - t0

    same = 0
    for p, h, o in zip(probs, hf, outs):
        v = list(o.outputs[0].token_ids)
        if v and v[-1] == tok.eos_token_id:
            v = v[:-1]
        ok = v == h and list(o.prompt_token_ids) == tok(p.prompt)["input_ids"]
        same += ok
        text = o.outputs[0].text
        print(
            f"{p.prompt.strip():18s} steps {p.difficulty:3d}  tokens hf {len(h):4d} vllm "
            f"{len(v):4d}  {'same' if ok else 'DIFFERENT'}  reward {task.reward(p, text):.0f}"
        )
    res = {"model": d, "problems": len(probs), "identical": same, "hf_seconds": round(t_hf, 1),
           "vllm_start_seconds": round(t_start, 1), "vllm_seconds": round(t_vllm, 1)}
    print(json.dumps(res))
    return 0 if same == len(probs) else 1


if __name__ == "__main__":
    sys.exit(main())
