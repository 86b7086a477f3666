"""diffusers' models, exported by the real torch.export (ctest `corpus_diffusers_*`, and
`corpus_diffusers_tv_*` for the torch 2.14.1 venv).

    python corpus_diffusers.py write <dir>    export and save every case into <dir>/diffusers_<torch>/
    python corpus_diffusers.py read <dir>     torch.export.load runs xport's re-saves

UNets (with attention blocks and cross-attention), the VAE (encode then decode), DiT, PixArt,
SD3 and Flux transformers and a ControlNet, built from the library's code with small random-init
configs (no downloads), called as pipelines call them (keyword arguments, their output
dataclasses), each exported static, with a dynamic batch Dim, and after run_decompositions(),
as corpus.py exports transformers (same io files, index and table). The reference outputs are
torch.export.load(...).module()'s; where torch's own module fails on its core-ATen program
(torch 2.13 on diffusers' attention blocks: native_group_norm refuses the layout the
decomposed attention leaves), the eager model's, and the index says so. By default the CI
subset; XPORT_CORPUS_FULL=1 exports all. Cached like corpus.py's.
"""
import copy
import hashlib
import inspect
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

Dim = torch.export.Dim
SEED = 0
CI_MODELS = ("unet2d_attn", "unet2d_condition", "vae", "dit", "sd3", "flux")


def models():
    """name -> (family, kind, make); diffusers is imported here."""
    import diffusers as D
    D.utils.logging.set_verbosity_error()
    unet_blocks = dict(block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8)
    out = {
        "unet2d_attn": ("unet", "unet2d", lambda: D.UNet2DModel(
            sample_size=16, in_channels=3, out_channels=3, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"), attention_head_dim=8, **unet_blocks)),
        "unet2d_condition": ("unet", "unet2d_condition", lambda: D.UNet2DConditionModel(
            sample_size=16, in_channels=4, out_channels=4, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=24, attention_head_dim=8,
            **unet_blocks)),
        "vae": ("vae", "vae", lambda: D.AutoencoderKL(
            in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
            up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"), block_out_channels=(16, 32),
            layers_per_block=1, latent_channels=4, norm_num_groups=8, sample_size=32)),
        "dit": ("transformer", "dit", lambda: D.DiTTransformer2DModel(
            num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4, num_layers=2, sample_size=16,
            patch_size=2, num_embeds_ada_norm=10, norm_num_groups=8)),
        "pixart": ("transformer", "pixart", lambda: D.PixArtTransformer2DModel(
            num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8, num_layers=2, sample_size=16,
            patch_size=2, cross_attention_dim=16, caption_channels=24, norm_num_groups=8)),
        "sd3": ("transformer", "sd3", lambda: D.SD3Transformer2DModel(
            sample_size=16, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=2,
            joint_attention_dim=24, caption_projection_dim=16, pooled_projection_dim=12, out_channels=4,
            pos_embed_max_size=16)),
        "flux": ("transformer", "flux", lambda: D.FluxTransformer2DModel(
            patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=8,
            num_attention_heads=2, joint_attention_dim=24, pooled_projection_dim=12, guidance_embeds=False,
            axes_dims_rope=(2, 2, 4))),
        "controlnet": ("controlnet", "controlnet", lambda: D.ControlNetModel(
            in_channels=4, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), cross_attention_dim=24,
            attention_head_dim=8, conditioning_embedding_out_channels=(8, 16), **unet_blocks)),
    }
    if os.environ.get("XPORT_CORPUS_FULL") != "1":
        out = {k: v for k, v in out.items() if k in CI_MODELS}
    return out


def call_of(kind, batch):
    """(kwargs, dynamic_shapes) of one call as a pipeline makes it."""
    g = torch.Generator().manual_seed(batch)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    t = torch.tensor([10.0 + i for i in range(batch)])
    b = Dim("batch", min=1, max=16)
    if kind == "unet2d":
        return {"sample": r(batch, 3, 16, 16), "timestep": t}, {"sample": {0: b}, "timestep": {0: b}}
    if kind in ("unet2d_condition", "controlnet"):
        kw = {"sample": r(batch, 4, 16, 16), "timestep": t, "encoder_hidden_states": r(batch, 5, 24)}
        ds = {"sample": {0: b}, "timestep": {0: b}, "encoder_hidden_states": {0: b}}
        if kind == "controlnet":
            kw["controlnet_cond"], ds["controlnet_cond"] = r(batch, 3, 32, 32), {0: b}  # 1/2 the conditioning: 16 x 16
        return kw, ds
    if kind == "vae":
        return {"sample": r(batch, 3, 32, 32)}, {"sample": {0: b}}
    if kind == "dit":
        return ({"hidden_states": r(batch, 4, 16, 16), "timestep": t, "class_labels": torch.arange(batch) % 10},
                {"hidden_states": {0: b}, "timestep": {0: b}, "class_labels": {0: b}})
    if kind == "pixart":
        return ({"hidden_states": r(batch, 4, 16, 16), "encoder_hidden_states": r(batch, 5, 24), "timestep": t,
                 "added_cond_kwargs": {"resolution": None, "aspect_ratio": None}},
                {"hidden_states": {0: b}, "encoder_hidden_states": {0: b}, "timestep": {0: b},
                 "added_cond_kwargs": {"resolution": None, "aspect_ratio": None}})
    if kind == "sd3":
        return ({"hidden_states": r(batch, 4, 16, 16), "encoder_hidden_states": r(batch, 5, 24),
                 "pooled_projections": r(batch, 12), "timestep": t},
                {"hidden_states": {0: b}, "encoder_hidden_states": {0: b}, "pooled_projections": {0: b},
                 "timestep": {0: b}})
    if kind == "flux":
        return ({"hidden_states": r(batch, 16, 16), "encoder_hidden_states": r(batch, 5, 24),
                 "pooled_projections": r(batch, 12), "timestep": t / 1000, "img_ids": torch.zeros(16, 3),
                 "txt_ids": torch.zeros(5, 3)},
                {"hidden_states": {0: b}, "encoder_hidden_states": {0: b}, "pooled_projections": {0: b},
                 "timestep": {0: b}, "img_ids": None, "txt_ids": None})
    raise ValueError(kind)


def reference(path, model, kwargs):
    """What torch.export.load(path).module() gives for kwargs, or where torch's own module fails,
    the eager model's (and why)."""
    ep = torch.export.load(path)
    torch.manual_seed(SEED)
    with torch.no_grad():
        try:
            return corpus.leaves(ep.module()(**copy.deepcopy(kwargs))), None
        except Exception as e:
            torch.manual_seed(SEED)
            return corpus.leaves(model(**copy.deepcopy(kwargs))), f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


def export_case(name, family, kind, make, variant, out_dir):
    torch.manual_seed(SEED)
    model = make().eval()
    # one image, as a pipeline makes it (a size-1 batch: the layouts torch 2.13's own core-ATen
    # module refuses); the dynamic batch from two
    kwargs, ds = call_of(kind, 2 if variant == "dynamic" else 1)
    entry = {"name": f"{name}_{variant}", "arch": name, "family": family, "variant": variant,
             "model": type(model).__name__}
    t0 = time.time()

    def export():
        ep = torch.export.export(model, (), kwargs, dynamic_shapes=ds if variant == "dynamic" else None)
        return ep.run_decompositions() if variant == "decomposed" else ep
    ep, path = corpus.export_saved(entry, out_dir, export)
    if ep is None:
        return entry
    outputs, why = reference(path, model, kwargs)
    if why:
        entry["reference_is_eager"] = why
    io = {"args": (), "kwargs": kwargs, "outputs": outputs, "seed": SEED, "after": {"state": {}, "inputs": []},
          "extra": []}
    if variant == "dynamic":
        for batch in (3, 5):
            kw, _ = call_of(kind, batch)
            io["extra"].append({"args": (), "kwargs": kw, "outputs": reference(path, model, kw)[0]})
    torch.save(io, os.path.join(out_dir, entry["name"] + ".io.pt"))
    entry["seconds"] = round(time.time() - t0, 2)
    entry["out_spec"] = torch.utils._pytree.treespec_dumps(ep.call_spec.out_spec)
    return entry


def cache_key():
    import diffusers
    code = "".join(inspect.getsource(f) for f in (models, call_of, reference, export_case, corpus.leaves,
                                                   corpus.export_saved))
    code += repr((SEED, CI_MODELS, os.environ.get("XPORT_CORPUS_FULL") == "1"))
    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    return f"diffusers_torch-{torch.__version__}_diffusers-{diffusers.__version__}_{digest}"


def folder():
    return "diffusers_" + torch.__version__.split("+")[0].replace(".", "_")


def write(root):
    corpus.write_cached(os.path.join(root, folder()), cache_key(), models(), export_case)


def read(root):
    import json
    # the output dataclasses (UNet2DOutput, ...) register themselves when their module is imported
    corpus.import_output_types(os.path.join(root, folder(), "index.json"))
    with open(os.path.join(root, folder(), "index.json")) as f:
        cannot = {e["name"] for e in json.load(f) if "reference_is_eager" in e}
    corpus.read_saved(os.path.join(root, folder() + "_xport_saved"),
                      lambda module, call: corpus.leaves(module(**dict(call["kwargs"]))), cannot)


if __name__ == "__main__":
    corpus.cli(write, read, __doc__)
