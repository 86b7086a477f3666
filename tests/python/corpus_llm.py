"""Decoder-only LLMs exported with transformers' static KV cache, as its executorch integration
exports them (ctest `corpus_llm_*`).

    python3 corpus_llm.py write <dir>    export, save and generate with Python into <dir>/llm/
    python3 corpus_llm.py read <dir>     torch.export.load generates with xport's re-saves (<dir>/llm_xport_saved/)

Each architecture (small random-init configs, no downloads) is wrapped by
transformers.integrations.executorch.TorchExportableModuleForDecoderOnlyLM (batch 1, a cache of
MAX_CACHE tokens held in buffers: keys, values, and the cumulative length counters the cache
updates through `.to(...)`), and exported four ways:
  one_token    input_ids [1, 1] and cache_position [1]: the decode step ExecuTorch's runner calls
  prefill      input_ids [1, seq] with a dynamic seq (Dim), cache_position [seq]
  core_aten    one_token after run_decompositions()
  bf16         one_token of the model in bfloat16
Beside each <name>.pt2, <name>.gen.pt holds what Python's ep.module() gives: for the one-token
programs a greedy generation (the prompt fed one token at a time, then NEW_TOKENS tokens, as
transformers' TorchExportableModuleWithStaticCache.generate does), with the logits of every
step and the buffers after it; for prefill, the prompt's logits and the buffers after one call.
tests/test_corpus.cpp generates with xport (interpreter, engine, xport's own lowering) and
requires the same tokens, logits and buffers. By default two architectures (CI's);
XPORT_CORPUS_FULL=1 exports all. Cached like corpus.py's.
"""
import hashlib
import inspect
import json
import os
import shutil
import sys
import time
import traceback
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402  (the cache and the command line)

SEED = 0
MAX_CACHE = 24
PROMPT = [3, 17, 42, 8, 25]
NEW_TOKENS = 8
CI_ARCHS = ("llama", "qwen2")


def architectures():
    """name -> a function making the model (transformers imported here)."""
    import transformers as T
    T.logging.set_verbosity_error()
    base = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64)

    def lm(config, model, **kw):
        return lambda: getattr(T, model)(getattr(T, config)(**{**base, **kw}))

    archs = {
        "llama": lm("LlamaConfig", "LlamaForCausalLM"),
        "qwen2": lm("Qwen2Config", "Qwen2ForCausalLM"),
        "mistral": lm("MistralConfig", "MistralForCausalLM", sliding_window=None),
        "qwen3": lm("Qwen3Config", "Qwen3ForCausalLM", head_dim=8),
        "gemma": lm("GemmaConfig", "GemmaForCausalLM", head_dim=8),
        "phi3": lm("Phi3Config", "Phi3ForCausalLM", pad_token_id=0),
        "olmo": lm("OlmoConfig", "OlmoForCausalLM"),
        "smollm3": lm("SmolLM3Config", "SmolLM3ForCausalLM"),
    }
    if os.environ.get("XPORT_CORPUS_FULL") != "1":
        archs = {k: v for k, v in archs.items() if k in CI_ARCHS}
    return archs


def wrapped(make, dtype):
    """The model, in `dtype`, wrapped for export with its static cache."""
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
    torch.manual_seed(SEED)
    model = make().to(dtype).eval()
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static", max_length=MAX_CACHE,
                                               cache_config={"batch_size": 1, "max_cache_len": MAX_CACHE})
    return TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=MAX_CACHE)


def buffers(module):
    return {k: v.detach().clone() for k, v in module.named_buffers()}


def generate(path):
    """Greedy generation with torch.export.load(path).module(), one token a call."""
    module = torch.export.load(path).module()
    tokens, logits = list(PROMPT), []
    for pos in range(len(PROMPT) + NEW_TOKENS - 1):
        with torch.no_grad():
            out = module(input_ids=torch.tensor([[tokens[pos]]]), cache_position=torch.tensor([pos]))
        logits.append(out[0, -1].clone())
        if pos + 1 >= len(PROMPT):
            tokens.append(int(torch.argmax(out[0, -1]).item()))
    return {"prompt": torch.tensor(PROMPT), "tokens": torch.tensor(tokens), "logits": torch.stack(logits),
            "buffers": buffers(module)}


def prefill(path):
    module = torch.export.load(path).module()
    with torch.no_grad():
        out = module(input_ids=torch.tensor([PROMPT]), cache_position=torch.arange(len(PROMPT)))
    return {"prompt": torch.tensor(PROMPT), "logits": out[0].clone(), "buffers": buffers(module)}


def export_case(name, family, kind, make, variant, out_dir):
    entry = {"name": f"{name}_{variant}", "arch": name, "family": family, "variant": variant}
    t0 = time.time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = wrapped(make, torch.bfloat16 if variant == "bf16" else torch.float32)
            if variant == "prefill":
                seq = torch.export.Dim("seq", min=2, max=MAX_CACHE - 1)
                ep = module.export(input_ids=torch.tensor([PROMPT]), cache_position=torch.arange(len(PROMPT)),
                                   dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}})
            else:
                ep = module.export(input_ids=torch.tensor([[PROMPT[0]]]), cache_position=torch.tensor([0]))
            if variant == "core_aten":
                ep = ep.run_decompositions()
    except Exception as e:
        entry["torch_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        return entry
    path = os.path.join(out_dir, entry["name"] + ".pt2")
    torch.export.save(ep, path)
    torch.save(prefill(path) if variant == "prefill" else generate(path), os.path.join(out_dir, entry["name"] + ".gen.pt"))
    entry["seconds"] = round(time.time() - t0, 2)
    return entry


VARIANTS = ("one_token", "prefill", "core_aten", "bf16")


def cache_key():
    import transformers
    code = "".join(inspect.getsource(f) for f in (architectures, wrapped, buffers, generate, prefill, export_case))
    code += repr((SEED, MAX_CACHE, PROMPT, NEW_TOKENS, VARIANTS, os.environ.get("XPORT_CORPUS_FULL") == "1"))
    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    return f"llm_torch-{torch.__version__}_transformers-{transformers.__version__}_{digest}"


def write(root):
    cases = {name: ("decoder", "text", make) for name, make in architectures().items()}
    corpus.write_cached(os.path.join(root, "llm"), cache_key(), cases, export_case, VARIANTS)


def read(root):
    """torch.export.load generates with every archive xport saved again: the same tokens."""
    saved = os.path.join(root, "llm_xport_saved")
    with open(os.path.join(saved, "index.json")) as f:
        index = json.load(f)
    failures = []
    for entry in index:
        name = entry["name"]
        try:
            want = torch.load(os.path.join(saved, name + ".gen.pt"), weights_only=False)
            got = (prefill if name.endswith("_prefill") else generate)(os.path.join(saved, name + ".pt2"))
            if "tokens" in want and not torch.equal(got["tokens"], want["tokens"]):
                failures.append(f"{name}: torch generates {got['tokens'].tolist()}, xport {want['tokens'].tolist()}")
            elif not torch.allclose(got["logits"].float(), want["logits"].float(), rtol=1e-4, atol=1e-5):
                failures.append(f"{name}: the logits differ")
        except Exception as e:
            failures.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            traceback.print_exc()
        print(f"{'FAIL' if failures and failures[-1].startswith(name + ':') else 'ok  '} {name}", flush=True)
    print(f"\ntorch {torch.__version__} generated with {len(index) - len(failures)} of {len(index)} archives xport saved")
    if failures:
        for f in failures:
            print("  " + f)
        sys.exit(1)


if __name__ == "__main__":
    corpus.cli(write, read, __doc__)
