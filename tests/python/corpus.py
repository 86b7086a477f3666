"""Real models from the Python ecosystem, exported by the real torch.export (ctest `corpus_*`).

    python3 corpus.py write <dir>     export and save every case into <dir>/py/ (cached, see below)
    python3 corpus.py read <dir>      torch.export.load runs xport's re-saved archives (<dir>/xport_saved/)

The corpus: Hugging Face `transformers` architectures (decoders, encoders, encoder-decoders,
vision and audio models), built from their library's code with small random-init configs (no
downloads), called as users call them (keyword arguments, ModelOutput results, use_cache=False
for generation models), each exported three ways:
  static      torch.export.export(model, (), kwargs)
  dynamic     with a batch Dim (and a sequence Dim where the input has one), and calls at
              other sizes
  decomposed  the static program after run_decompositions() (core ATen IR)
Each <name>.pt2 comes with <name>.io.pt (the layout of tests/test_interop.cpp: args, kwargs,
outputs of torch.export.load(...).module(), extra calls) and <dir>/py/index.json lists every
case, those torch.export itself fails on too (with torch's error), so that the table in
tests/test_corpus.cpp has a row for each.

The exports are cached per torch and transformers version and this file's contents, under
$XPORT_CORPUS_CACHE (default ~/.cache/xport/corpus): a second run copies them.
"""
import copy
import hashlib
import json
import os
import shutil
import sys
import time
import traceback
import warnings

import torch
import torch.utils._pytree as pytree

Dim = torch.export.Dim
SEED = 0
B, S = 2, 8  # example batch and sequence length


# ---- the architectures ---------------------------------------------------------------------------

def _text_config(**kw):
    base = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                max_position_embeddings=64)
    base.update(kw)
    return base


def _audio_config(**kw):
    base = dict(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=2)
    base.update(kw)
    return base


def _vision_config(**kw):
    base = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=37)
    base.update(kw)
    return base


def architectures():
    """name -> (family, input kind, a function making the model); transformers is imported here."""
    import transformers as T
    T.logging.set_verbosity_error()

    def lm(config, model, **kw):
        return lambda: getattr(T, model)(getattr(T, config)(**_text_config(**kw)))

    def build(config, model, **kw):
        return lambda: getattr(T, model)(getattr(T, config)(**kw))

    seq2seq = dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64,
                   pad_token_id=0, decoder_start_token_id=0)
    return {
        # decoders (causal LMs)
        "gpt2": ("decoder", "text", build("GPT2Config", "GPT2LMHeadModel", n_layer=2, n_embd=32, n_head=4, vocab_size=99,
                                          n_positions=64)),
        "llama": ("decoder", "text", lm("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2)),
        "mistral": ("decoder", "text", lm("MistralConfig", "MistralForCausalLM", num_key_value_heads=2)),
        "qwen2": ("decoder", "text", lm("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2)),
        "qwen3": ("decoder", "text", lm("Qwen3Config", "Qwen3ForCausalLM", num_key_value_heads=2, head_dim=8)),
        "gemma": ("decoder", "text", lm("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=2, head_dim=8)),
        "gemma2": ("decoder", "text", lm("Gemma2Config", "Gemma2ForCausalLM", num_key_value_heads=2, head_dim=8)),
        "phi": ("decoder", "text", lm("PhiConfig", "PhiForCausalLM")),
        "phi3": ("decoder", "text", lm("Phi3Config", "Phi3ForCausalLM", num_key_value_heads=2, pad_token_id=0)),
        "olmo": ("decoder", "text", lm("OlmoConfig", "OlmoForCausalLM")),
        "stablelm": ("decoder", "text", lm("StableLmConfig", "StableLmForCausalLM", num_key_value_heads=2)),
        "gpt_neox": ("decoder", "text", lm("GPTNeoXConfig", "GPTNeoXForCausalLM")),
        "gpt_neo": ("decoder", "text", build("GPTNeoConfig", "GPTNeoForCausalLM", vocab_size=99, hidden_size=32,
                                             num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
                                             max_position_embeddings=64)),
        "gptj": ("decoder", "text", build("GPTJConfig", "GPTJForCausalLM", vocab_size=99, n_embd=32, n_layer=2, n_head=4,
                                          rotary_dim=4, n_positions=64)),
        "opt": ("decoder", "text", build("OPTConfig", "OPTForCausalLM", vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, ffn_dim=37, max_position_embeddings=64,
                                         word_embed_proj_dim=32)),
        "bloom": ("decoder", "text", build("BloomConfig", "BloomForCausalLM", vocab_size=99, hidden_size=32, n_layer=2,
                                           n_head=4)),
        "falcon": ("decoder", "text", build("FalconConfig", "FalconForCausalLM", vocab_size=99, hidden_size=32,
                                            num_hidden_layers=2, num_attention_heads=4)),
        "codegen": ("decoder", "text", build("CodeGenConfig", "CodeGenForCausalLM", vocab_size=99, n_embd=32, n_layer=2,
                                             n_head=4, rotary_dim=4, n_positions=64, n_ctx=64)),
        "gpt_bigcode": ("decoder", "text", build("GPTBigCodeConfig", "GPTBigCodeForCausalLM", vocab_size=99, n_embd=32,
                                                 n_layer=2, n_head=4, n_positions=64)),
        "starcoder2": ("decoder", "text", lm("Starcoder2Config", "Starcoder2ForCausalLM", num_key_value_heads=2)),
        "mixtral": ("decoder", "text", lm("MixtralConfig", "MixtralForCausalLM", num_key_value_heads=2,
                                          num_local_experts=4, num_experts_per_tok=2)),
        # encoders
        "bert": ("encoder", "text", lm("BertConfig", "BertForMaskedLM")),
        "roberta": ("encoder", "text", lm("RobertaConfig", "RobertaForMaskedLM", pad_token_id=1)),
        "xlm_roberta": ("encoder", "text", lm("XLMRobertaConfig", "XLMRobertaForMaskedLM", pad_token_id=1)),
        "electra": ("encoder", "text", lm("ElectraConfig", "ElectraForMaskedLM", embedding_size=32)),
        "albert": ("encoder", "text", lm("AlbertConfig", "AlbertForMaskedLM", embedding_size=16)),
        "distilbert": ("encoder", "text", build("DistilBertConfig", "DistilBertForMaskedLM", vocab_size=99, dim=32,
                                                n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=64)),
        "deberta_v2": ("encoder", "text", lm("DebertaV2Config", "DebertaV2ForMaskedLM")),
        "mpnet": ("encoder", "text", lm("MPNetConfig", "MPNetForMaskedLM")),
        "modernbert": ("encoder", "text", lm("ModernBertConfig", "ModernBertForMaskedLM", global_attn_every_n_layers=2,
                                             local_attention=4, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                             cls_token_id=1, sep_token_id=2)),
        # encoder-decoders
        "t5": ("encoder-decoder", "seq2seq", build("T5Config", "T5ForConditionalGeneration", vocab_size=99, d_model=32,
                                                   d_kv=8, d_ff=37, num_layers=2, num_heads=4, decoder_start_token_id=0)),
        "bart": ("encoder-decoder", "seq2seq", build("BartConfig", "BartForConditionalGeneration", **seq2seq)),
        "marian": ("encoder-decoder", "seq2seq", build("MarianConfig", "MarianMTModel", **seq2seq)),
        "whisper": ("encoder-decoder", "speech2text", build(
            "WhisperConfig", "WhisperForConditionalGeneration", vocab_size=99, d_model=32, encoder_layers=2,
            decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
            decoder_ffn_dim=37, num_mel_bins=8, max_source_positions=16, max_target_positions=32,
            decoder_start_token_id=0, pad_token_id=0)),
        # vision
        "vit": ("vision", "image", build("ViTConfig", "ViTForImageClassification", **_vision_config())),
        "deit": ("vision", "image", build("DeiTConfig", "DeiTForImageClassification", **_vision_config())),
        "beit": ("vision", "image", build("BeitConfig", "BeitForImageClassification", **_vision_config())),
        "dinov2": ("vision", "image", build("Dinov2Config", "Dinov2Model", image_size=32, patch_size=8, hidden_size=32,
                                            num_hidden_layers=2, num_attention_heads=4)),
        "swin": ("vision", "image", build("SwinConfig", "SwinForImageClassification", image_size=32, patch_size=4,
                                          embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4)),
        "convnext": ("vision", "image", build("ConvNextConfig", "ConvNextForImageClassification", hidden_sizes=[8, 16],
                                              depths=[1, 1], num_stages=2)),
        "resnet": ("vision", "image", build("ResNetConfig", "ResNetForImageClassification", embedding_size=8,
                                            hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")),
        "mobilenet_v2": ("vision", "image", build("MobileNetV2Config", "MobileNetV2ForImageClassification",
                                                  depth_multiplier=0.25, image_size=32)),
        "regnet": ("vision", "image", build("RegNetConfig", "RegNetForImageClassification", embedding_size=8,
                                            hidden_sizes=[8, 16], depths=[1, 1], groups_width=8)),
        "segformer": ("vision", "image", build("SegformerConfig", "SegformerForSemanticSegmentation",
                                               num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                                               num_attention_heads=[1, 2], decoder_hidden_size=16, patch_sizes=[7, 3],
                                               strides=[4, 2], mlp_ratios=[2, 2])),
        "mobilevit": ("vision", "image", build("MobileViTConfig", "MobileViTForImageClassification", image_size=32,
                                               hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 48])),
        "poolformer": ("vision", "image", build("PoolFormerConfig", "PoolFormerForImageClassification",
                                                hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1])),
        # audio
        "wav2vec2": ("audio", "audio", build("Wav2Vec2Config", "Wav2Vec2ForCTC", **_audio_config())),
        "hubert": ("audio", "audio", build("HubertConfig", "HubertForCTC", **_audio_config())),
        "wavlm": ("audio", "audio", build("WavLMConfig", "WavLMForCTC", **_audio_config())),
        # multimodal
        "clip": ("multimodal", "text+image", build("CLIPConfig", "CLIPModel", projection_dim=16,
                                                   text_config=_text_config(), vision_config=_vision_config())),
    }


def call_of(kind, batch, seq, model):
    """(kwargs, dynamic_shapes) of one call as users make it; batch/seq are the sizes."""
    g = torch.Generator().manual_seed(batch * 100 + seq)
    ids = lambda n: torch.randint(0, 99, (batch, n), generator=g)  # noqa: E731
    b, s = Dim("batch", max=64), Dim("seq", max=64)
    if kind == "text":
        kw = {"input_ids": ids(seq), "attention_mask": torch.ones(batch, seq, dtype=torch.long)}
        kw["attention_mask"][0, : seq // 4] = 0  # left padding in the first row
        ds = {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: s}}
        if "ForCausalLM" in type(model).__name__ or "LMHead" in type(model).__name__:
            kw["use_cache"], ds["use_cache"] = False, None
    elif kind == "seq2seq":
        kw = {"input_ids": ids(seq), "decoder_input_ids": ids(max(seq // 2, 1)), "use_cache": False}
        ds = {"input_ids": {0: b, 1: s}, "decoder_input_ids": {0: b, 1: Dim("target", max=64)}, "use_cache": None}
    elif kind == "speech2text":
        kw = {"input_features": torch.randn(batch, 8, 32, generator=g), "decoder_input_ids": ids(max(seq // 2, 1)),
              "use_cache": False}
        ds = {"input_features": {0: b}, "decoder_input_ids": {0: b, 1: Dim("target", max=32)}, "use_cache": None}
    elif kind == "image":
        kw = {"pixel_values": torch.randn(batch, 3, 32, 32, generator=g)}
        ds = {"pixel_values": {0: b}}
    elif kind == "audio":
        kw = {"input_values": torch.randn(batch, 50 * seq, generator=g)}
        ds = {"input_values": {0: b, 1: Dim.AUTO}}  # conv strides: torch picks the sample count's form
    elif kind == "text+image":
        kw = {"input_ids": ids(seq), "pixel_values": torch.randn(batch, 3, 32, 32, generator=g)}
        ds = {"input_ids": {0: b, 1: s}, "pixel_values": {0: b}}
    else:
        raise ValueError(kind)
    return kw, ds


# torch refuses a named Dim where the model specializes it: the Dim torch accepts instead
DYNAMIC_OVERRIDES = {
    "gpt_neo": lambda ds: {**ds, "input_ids": {0: ds["input_ids"][0], 1: Dim.AUTO},
                           "attention_mask": {0: ds["attention_mask"][0], 1: Dim.AUTO}},
}


# ---- writing -------------------------------------------------------------------------------------

def leaves(out):
    return [None if t is None else t.detach().clone() for t in pytree.tree_leaves(out)
            if t is None or isinstance(t, torch.Tensor)]


def reference(path, kwargs):
    """What torch.export.load(path).module() gives for kwargs (one thread, seeded, no autograd
    graph kept: the models are in eval mode)."""
    ep = torch.export.load(path)
    torch.manual_seed(SEED)
    return leaves(ep.module()(**copy.deepcopy(kwargs)))


def export_case(name, family, kind, make, variant, out_dir):
    torch.manual_seed(SEED)
    model = make().eval()
    kwargs, ds = call_of(kind, B, S, model)
    if variant == "dynamic" and name in DYNAMIC_OVERRIDES:
        ds = DYNAMIC_OVERRIDES[name](ds)
    entry = {"name": f"{name}_{variant}", "arch": name, "family": family, "variant": variant,
             "model": type(model).__name__}
    t0 = time.time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(model, (), kwargs, dynamic_shapes=ds if variant == "dynamic" else None)
            if variant == "decomposed":
                ep = ep.run_decompositions()
    except Exception as e:  # torch.export itself fails: a row of the table, with torch's reason
        entry["torch_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        return entry
    path = os.path.join(out_dir, entry["name"] + ".pt2")
    torch.export.save(ep, path)
    io = {"args": (), "kwargs": kwargs, "outputs": reference(path, kwargs), "seed": SEED,
          "after": {"state": {}, "inputs": []}, "extra": []}
    if variant == "dynamic":  # other sizes within the Dims, where torch's own program takes them
        for batch, seq in ((3, 5), (1, 12)):
            kw, _ = call_of(kind, batch, seq, model)
            try:
                io["extra"].append({"args": (), "kwargs": kw, "outputs": reference(path, kw)})
            except Exception as e:  # e.g. a guard torch added at batch 1 (0/1 specialization)
                entry.setdefault("extra_refused_by_torch", []).append(
                    f"batch {batch}, seq {seq}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    torch.save(io, os.path.join(out_dir, entry["name"] + ".io.pt"))
    entry["seconds"] = round(time.time() - t0, 2)
    entry["out_spec"] = pytree.treespec_dumps(ep.call_spec.out_spec)
    return entry


def cache_key():
    """The versions and the code that make the exports (not the reader below)."""
    import inspect
    import transformers
    code = "".join(inspect.getsource(f) for f in (_text_config, _audio_config, _vision_config, architectures, call_of,
                                                   leaves, reference, export_case))
    code += repr(sorted(DYNAMIC_OVERRIDES)) + repr((SEED, B, S))
    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    return f"torch-{torch.__version__}_transformers-{transformers.__version__}_{digest}"


def export_saved(entry, out_dir, export):
    """Runs `export()` (torch.export, warnings silenced) and saves its program as
    <out_dir>/<entry name>.pt2: the program and its path, or (None, None) with entry["torch_error"]
    (a row of the table, torch's reason) when torch fails."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = export()
    except Exception as e:
        entry["torch_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        return None, None
    path = os.path.join(out_dir, entry["name"] + ".pt2")
    torch.export.save(ep, path)
    return ep, path


def module_leaves(path, args, seed):
    """The leaves torch.export.load(path).module() gives for `args` (seeded, no grad)."""
    loaded = torch.export.load(path)
    torch.manual_seed(seed)
    with torch.no_grad():
        return leaves(loaded.module()(*args))


def write_cached(out_dir, key, cases, export, variants=("static", "dynamic", "decomposed")):
    """Exports `cases` (name -> (family, kind, make)) in each of `variants` into `out_dir` with
    `export(name, family, kind, make, variant, out_dir) -> index entry`, or copies them from the
    cache entry `key` when a run made it before."""
    cache = os.path.join(os.environ.get("XPORT_CORPUS_CACHE", os.path.expanduser("~/.cache/xport/corpus")), key)
    shutil.rmtree(out_dir, ignore_errors=True)
    if os.path.exists(os.path.join(cache, "index.json")):
        shutil.copytree(cache, out_dir)
        print(f"corpus: copied from the cache {cache}")
        return
    os.makedirs(out_dir)
    index = []
    for name, (family, kind, make) in cases.items():
        for variant in variants:
            entry = export(name, family, kind, make, variant, out_dir)
            index.append(entry)
            print(f"{entry['name']}: {entry.get('torch_error', 'ok')} ({entry.get('seconds', '-')} s)", flush=True)
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    shutil.copytree(out_dir, cache)
    print(f"corpus: {len(index)} cases by torch {torch.__version__} in {out_dir} (cached in {cache})")


def write(root):
    write_cached(os.path.join(root, "py"), cache_key(), architectures(), export_case)


# ---- reading xport's archives --------------------------------------------------------------------

def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    # atol relative to the output's scale, as tests/test_corpus.cpp compares (Inception's random
    # init gives outputs of 1e10, where an element that cancels differs by more than 1e-5)
    scale = max(1.0, b.abs().max().item()) if b.numel() else 1.0
    return torch.allclose(a, b, rtol=1e-4, atol=1e-5 * scale, equal_nan=True)


def import_output_types(index_path):
    """Imports the modules that define the pytree types the corpus's programs return (a model's
    ModelOutput classes register themselves when their modeling module is imported), as a user
    imports the model's library before torch.export.load."""
    import importlib
    with open(index_path) as f:
        index = json.load(f)

    def types(spec):
        if spec.get("type"):
            yield spec["type"]
        for c in spec.get("children_spec", []):
            yield from types(c)

    for entry in index:
        if "out_spec" not in entry:
            continue
        for t in types(json.loads(entry["out_spec"])[1]):
            module = t.rsplit(".", 1)[0]
            if module.split(".")[0] in ("transformers", "diffusers"):
                importlib.import_module(module)


def read_saved(saved, run, torch_cannot_run=()):
    """torch.export.load runs every archive of `saved` (xport's, listed in its index.json) on the
    calls of its io file, `run(module, call) -> leaves`, equal to the outputs xport gave. Those
    named in `torch_cannot_run` (torch's module fails on the program torch itself wrote) must
    load; their runs are not compared."""
    with open(os.path.join(saved, "index.json")) as f:
        index = json.load(f)
    failures = []
    for entry in index:
        name = entry["name"]
        try:
            io = torch.load(os.path.join(saved, name + ".io.pt"), weights_only=False)
            ep = torch.export.load(os.path.join(saved, name + ".pt2"))
            if name.removesuffix("_xport_lowered") in torch_cannot_run:
                print(f"load {name} (torch's own module cannot run this program)", flush=True)
                continue
            for k, call in enumerate([io] + list(io["extra"])):
                torch.manual_seed(io["seed"])
                got, want = run(ep.module(), call), list(call["outputs"])
                if not (len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))):
                    failures.append(f"{name}: call {k}: torch's outputs differ from xport's")
        except Exception as e:
            failures.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            traceback.print_exc()
        print(f"{'FAIL' if failures and failures[-1].startswith(name + ':') else 'ok  '} {name}", flush=True)
    loaded = len(index) - len({f.split(':')[0] for f in failures})
    print(f"\ntorch {torch.__version__} loaded and ran {loaded} of {len(index)} archives xport saved again")
    if failures:
        print(f"\n{len(failures)} failure(s):")
        for f in failures:
            print("  " + f)
        sys.exit(1)


def read(root):
    """torch.export.load runs every archive xport saved again (<root>/xport_saved/), with the
    outputs xport's interpreter gave (its io file)."""
    import_output_types(os.path.join(root, "py", "index.json"))
    read_saved(os.path.join(root, "xport_saved"), lambda module, call: leaves(module(**dict(call["kwargs"]))))


def cli(write_fn, read_fn, doc):
    """`<script> write|read <root>`, for this corpus and corpus_torchvision.py."""
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "read"):
        sys.exit(doc)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    (write_fn if sys.argv[1] == "write" else read_fn)(sys.argv[2])


if __name__ == "__main__":
    cli(write, read, __doc__)
