"""examples/generate.cpp against Python (ctest `example_generate`).

    python3 generate.py <generate executable> <dir of the LLM corpus (corpus_llm.py write)>

On the corpus's llama archives (the one-token decoder and the dynamic-length prefill that
transformers' static-cache export path wrote), Python's torch.export.load(...).module() generates
with the same steps as the example: the prompt one token a call or prefilled at once (its cache
copied into the decoder's), then greedy or sampled tokens (temperature, top-k, top-p, a seeded
torch.Generator). The example must print the same tokens, with the interpreter and the engine.
"""
import os
import subprocess
import sys

import torch

EXE, DIR = sys.argv[1], sys.argv[2]
PROMPT = [3, 17, 42, 8, 25]
NEW = 8


def pick(logits, temperature, top_k, top_p, gen):
    if temperature <= 0:
        return int(logits.argmax())
    x = logits.float() / temperature
    if 0 < top_k < x.numel():
        x = x.masked_fill(x < torch.topk(x, top_k).values[top_k - 1], float("-inf"))
    if top_p < 1:
        s, order = torch.sort(x, stable=True, dim=0, descending=True)
        probs = s.softmax(0)
        x = torch.empty_like(x).scatter(0, order, s.masked_fill((probs.cumsum(0) - probs) > top_p, float("-inf")))
    return int(torch.multinomial(x.softmax(0), 1, replacement=False, generator=gen))


def reference(decode, prefill, temperature, top_k, top_p, seed):
    module = torch.export.load(decode).module()
    gen = torch.Generator().manual_seed(seed)
    tokens = list(PROMPT)
    with torch.no_grad():
        if prefill:
            pre = torch.export.load(prefill).module()
            last = pre(input_ids=torch.tensor([PROMPT]), cache_position=torch.arange(len(PROMPT)))[0, -1]
            mine = dict(module.named_buffers())
            for name, b in pre.named_buffers():
                mine[name].copy_(b)
        else:
            for pos, t in enumerate(PROMPT):
                last = module(input_ids=torch.tensor([[t]]), cache_position=torch.tensor([pos]))[0, -1]
        for k in range(NEW):
            tokens.append(pick(last, temperature, top_k, top_p, gen))
            if k + 1 == NEW:
                break
            pos = len(tokens) - 1
            last = module(input_ids=torch.tensor([[tokens[-1]]]), cache_position=torch.tensor([pos]))[0, -1]
    return tokens


def main():
    decode, prefill = os.path.join(DIR, "llama_one_token.pt2"), os.path.join(DIR, "llama_prefill.pt2")
    greedy_corpus = torch.load(os.path.join(DIR, "llama_one_token.gen.pt"), weights_only=False)["tokens"].tolist()
    failures, runs = [], 0
    for sampling in [(0.0, 0, 1.0, 0), (0.8, 10, 0.9, 7), (1.3, 0, 0.7, 11)]:
        for use_prefill in [False, True]:
            want = reference(decode, prefill if use_prefill else None, *sampling)
            if sampling[0] == 0 and want != greedy_corpus:
                failures.append(f"the reference's greedy tokens {want} are not the corpus's {greedy_corpus}")
            for engine in [False, True]:
                t, k, p, seed = sampling
                args = [EXE, decode, "--prompt", ",".join(map(str, PROMPT)), "--new", str(NEW),
                        "--temperature", str(t), "--top-k", str(k), "--top-p", str(p), "--seed", str(seed)]
                args += ["--prefill", prefill] if use_prefill else []
                args += ["--engine"] if engine else []
                r = subprocess.run(args, capture_output=True, text=True)
                got = [int(v) for v in r.stdout.split()] if r.returncode == 0 else None
                runs += 1
                if got != want:
                    failures.append(f"{' '.join(args[1:])}: {got} (exit {r.returncode}: {r.stderr.strip()}), Python {want}")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"examples/generate: Python's tokens in all {runs} runs (greedy and sampled, prefilled or not, "
          "interpreter and engine)")


if __name__ == "__main__":
    main()
