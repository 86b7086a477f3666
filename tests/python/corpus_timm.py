"""timm's models, exported by the real torch.export of the torch 2.14.1 venv (ctest `corpus_timm_*`).

    <torch-2.14.1 venv>/bin/python corpus_timm.py write <dir>   export and save into <dir>/timm/
    <torch-2.14.1 venv>/bin/python corpus_timm.py read <dir>    torch runs xport's re-saves

timm needs torchvision, which imports beside torch 2.14.1 only (the venv of
tools/install-deps.sh). Architectures across timm's families, built with timm.create_model
(random weights, 10 classes, no downloads): attention kinds (global, windowed, relative,
rotary, cross, pooling, axial, linear), reparameterized blocks (RepVGG, MobileOne, FastViT,
RepViT, RepGhost), norms (BatchNorm, LayerNorm, GroupNorm, normalizer-free, frozen), MLP
mixers, hybrid and mobile networks. Each static, with a dynamic batch Dim, and after
run_decompositions(), as corpus.py exports transformers (same io files, index and table). By
default CI's subset (one of a kind); XPORT_CORPUS_FULL=1 exports all of them. Cached like
corpus.py's.
"""
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

# name -> family
ARCHS = {
    # plain and windowed attention, positional schemes
    "vit_tiny_patch16_224": "vit", "deit_tiny_patch16_224": "vit", "eva02_tiny_patch14_224": "vit (rotary)",
    "swin_tiny_patch4_window7_224": "windowed attention", "xcit_nano_12_p16_224": "cross-covariance attention",
    "crossvit_tiny_240": "cross attention", "cait_xxs24_224": "class attention", "pit_ti_224": "pooling vit",
    "pvt_v2_b0": "spatial-reduction attention", "mvitv2_tiny": "pooling attention", "levit_128s": "attention bias",
    "gcvit_xxtiny": "global context attention", "davit_tiny": "dual attention", "hiera_tiny_224": "hierarchical vit",
    "tiny_vit_5m_224": "windowed attention", "efficientvit_b0": "linear attention",
    "maxvit_tiny_rw_224": "axial attention", "coatnet_0_rw_224": "conv + attention",
    "halonet26t": "halo attention", "lambda_resnet26t": "lambda layers", "botnet26t_256": "bottleneck attention",
    # convolutional, norms
    "resnet18": "resnet", "resnet50d": "resnet", "res2net50_14w_8s": "res2net", "regnety_002": "regnet",
    "dpn48b": "dual path", "densenet121": "densenet", "dla34": "dla", "hrnet_w18_small": "hrnet",
    "ese_vovnet19b_dw": "vovnet", "cspresnet50": "csp", "tresnet_m": "inplace-abn",
    "nf_resnet26": "normalizer-free", "convnext_atto": "convnext (layernorm)", "convnextv2_atto": "convnext v2 (grn)",
    "inception_next_tiny": "inception next", "edgenext_xx_small": "edgenext", "hgnetv2_b0": "hgnet",
    # mobile
    "efficientnet_b0": "efficientnet", "mobilenetv3_small_100": "mobilenet v3", "mobilenetv4_conv_small": "mobilenet v4",
    "ghostnet_050": "ghostnet", "rexnet_100": "rexnet", "lcnet_050": "lcnet", "tinynet_e": "tinynet",
    "mobilevit_xxs": "mobilevit", "efficientformer_l1": "efficientformer", "efficientformerv2_s0": "efficientformer v2",
    # reparameterized blocks
    "repvgg_a0": "reparameterized", "mobileone_s0": "reparameterized", "fastvit_t8": "reparameterized",
    "repvit_m0_9": "reparameterized", "repghostnet_050": "reparameterized",
    # MLP mixers and metaformers
    "mixer_s16_224": "mlp mixer", "resmlp_12_224": "mlp mixer", "gmlp_s16_224": "mlp mixer",
    "poolformer_s12": "metaformer", "caformer_s18": "metaformer", "sequencer2d_s": "lstm mixer",
    "visformer_tiny": "visformer",
}
# CI's subset: one of each kind
CI = ("vit_tiny_patch16_224", "swin_tiny_patch4_window7_224", "resnet50d", "convnext_atto", "efficientnet_b0",
      "mobilevit_xxs", "repvgg_a0", "fastvit_t8", "mixer_s16_224", "nf_resnet26", "levit_128s", "coatnet_0_rw_224")
# image sizes the models need (fixed position embeddings, windows, strides)
SIZES = {"crossvit_tiny_240": 240, "botnet26t_256": 256, "halonet26t": 256, "lambda_resnet26t": 256,
         "swin_tiny_patch4_window7_224": 224, "tiny_vit_5m_224": 224, "maxvit_tiny_rw_224": 224,
         "coatnet_0_rw_224": 224, "mvitv2_tiny": 224, "hiera_tiny_224": 224, "davit_tiny": 224, "gcvit_xxtiny": 224,
         "efficientformer_l1": 224, "efficientformerv2_s0": 224, "levit_128s": 224, "cait_xxs24_224": 224,
         "xcit_nano_12_p16_224": 224, "pit_ti_224": 224, "resmlp_12_224": 224, "gmlp_s16_224": 224,
         "mixer_s16_224": 224, "vit_tiny_patch16_224": 224, "deit_tiny_patch16_224": 224,
         "eva02_tiny_patch14_224": 224, "sequencer2d_s": 224, "visformer_tiny": 224, "pvt_v2_b0": 224,
         "efficientvit_b0": 224, "fastvit_t8": 224, "repvit_m0_9": 224, "mobilevit_xxs": 256}


def models():
    import timm
    names = ARCHS if os.environ.get("XPORT_CORPUS_FULL") == "1" else {n: ARCHS[n] for n in CI}
    return {name: (family, "image", lambda name=name: timm.create_model(name, pretrained=False, num_classes=10))
            for name, family in names.items()}


def call_of(name, batch):
    g = torch.Generator().manual_seed(batch)
    size = SIZES.get(name, 64)
    return (torch.randn(batch, 3, size, size, generator=g),), ({0: Dim("batch", min=1, max=16)},)


def export_case(name, family, kind, make, variant, out_dir):
    torch.manual_seed(SEED)
    entry = {"name": f"{name}_{variant}", "arch": name, "family": family, "variant": variant}
    model = make().eval()
    entry["model"] = type(model).__name__
    args, ds = call_of(name, 2)
    t0 = time.time()

    def export():
        ep = torch.export.export(model, args, dynamic_shapes=ds if variant == "dynamic" else None)
        return ep.run_decompositions() if variant == "decomposed" else ep
    ep, path = corpus.export_saved(entry, out_dir, export)
    if ep is None:
        return entry

    io = {"args": args, "kwargs": {}, "outputs": corpus.module_leaves(path, args, SEED), "seed": SEED, "after": {"state": {}, "inputs": []},
          "extra": []}
    if variant == "dynamic":
        for batch in (1, 3):
            a, _ = call_of(name, batch)
            try:
                io["extra"].append({"args": a, "kwargs": {}, "outputs": corpus.module_leaves(path, a, SEED)})
            except Exception as e:
                entry.setdefault("extra_refused_by_torch", []).append(f"batch {batch}: {type(e).__name__}: {e}")
    torch.save(io, os.path.join(out_dir, entry["name"] + ".io.pt"))
    entry["seconds"] = round(time.time() - t0, 2)
    return entry


def cache_key():
    import timm
    code = "".join(inspect.getsource(f) for f in (models, call_of, export_case, corpus.leaves, corpus.export_saved,
                                                   corpus.module_leaves))
    code += repr((ARCHS, CI, SIZES, SEED, os.environ.get("XPORT_CORPUS_FULL") == "1"))
    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    return f"timm_torch-{torch.__version__}_timm-{timm.__version__}_{digest}"


def write(root):
    corpus.write_cached(os.path.join(root, "timm"), cache_key(), models(), export_case)


def read(root):
    def run(module, call):
        with torch.no_grad():
            return corpus.leaves(module(*call["args"]))
    corpus.read_saved(os.path.join(root, "timm_xport_saved"), run)


if __name__ == "__main__":
    corpus.cli(write, read, __doc__)
