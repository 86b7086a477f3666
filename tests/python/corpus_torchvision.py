"""torchvision's models, exported by the real torch.export of a newer torch (ctest `corpus_tv_*`).

    <torch-2.14.1 venv>/bin/python corpus_torchvision.py write <dir>   export and save into <dir>/tv/
    <torch-2.14.1 venv>/bin/python corpus_torchvision.py read <dir>    torch runs xport's re-saves

torchvision 0.29.1 needs torch 2.14.1 (PyPI's torchvision does not import beside 2.13):
tools/install-deps.sh makes that venv. So these archives are written by a newer torch than the
LibTorch xport builds against, and xport's archives are read back by it: both directions across
versions. Classification, segmentation, video and detection models, random weights (no
downloads), each static, with a dynamic batch Dim, and after run_decompositions(), as in
corpus.py (whose layout, io files and table these share). By default one model of each
architecture family (the smallest); XPORT_CORPUS_FULL=1 exports every model torchvision lists.
Cached like corpus.py's, per torch and torchvision version and this file's export code.
"""
import hashlib
import inspect
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402  (leaves, same, the io layout)

Dim = torch.export.Dim
SEED = 0

# what CI runs: one model of each architecture family, the smallest, and only families whose
# weights stay small (three archives of each are written, and xport writes them again): VGG
# (530 MB), AlexNet, ViT, wide and grouped ResNets, FCN and the larger video nets share their
# ops with the ones here and run with XPORT_CORPUS_FULL=1, as does every size of each family.
# The detection models are here for the row that says torch.export itself refuses them.
FAMILIES = [
    "convnext_tiny", "densenet121", "efficientnet_b0", "efficientnet_v2_s", "googlenet", "inception_v3", "maxvit_t",
    "mnasnet0_5", "mobilenet_v2", "mobilenet_v3_small", "regnet_x_400mf", "regnet_y_400mf", "resnet18",
    "shufflenet_v2_x0_5", "squeezenet1_0", "swin_t",
    "lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large",
    "mc3_18", "mvit_v2_s", "swin3d_t",
    "fasterrcnn_mobilenet_v3_large_320_fpn", "ssdlite320_mobilenet_v3_large",
]

# input sizes a model needs (fixed position embeddings, minimum resolutions)
IMAGE_SIZE = {"vit": 224, "maxvit": 224, "inception": 128, "googlenet": 64, "swin_v2": 64, "mvit": 224, "s3d": 224}


def image_size(name):
    for prefix, size in IMAGE_SIZE.items():
        if name.startswith(prefix):
            return size
    return 64


def models():
    """name -> (family, kind, builder)."""
    from torchvision import models as tvm
    out = {}
    for module, family, kind in ((tvm, "classification", "image"), (tvm.segmentation, "segmentation", "image"),
                                 (tvm.video, "video", "video"), (tvm.detection, "detection", "detection")):
        for name in tvm.list_models(module=module):
            if os.environ.get("XPORT_CORPUS_FULL") != "1" and name not in FAMILIES:
                continue
            kw = {"weights": None}
            if family in ("segmentation", "detection"):
                kw["weights_backbone"] = None  # no download
            if family == "classification" and name.startswith(("googlenet", "inception")):
                kw["init_weights"] = True
            if name.startswith(("googlenet", "inception")):
                kw["aux_logits"] = False
            out[name] = (family, kind, lambda name=name, kw=kw: tvm.get_model(name, **kw))
    return out


def call_of(name, kind, batch):
    g = torch.Generator().manual_seed(batch)
    size = image_size(name)
    b = Dim("batch", min=1, max=16)
    if kind == "image":
        return (torch.randn(batch, 3, size, size, generator=g),), ({0: b},)
    if kind == "video":
        frames = 16 if name.startswith(("mvit", "s3d")) else 8
        return (torch.randn(batch, 3, frames, size, size, generator=g),), ({0: b},)
    # detection: a list of images (eval mode returns boxes, labels, scores per image)
    return ([torch.rand(3, 128, 128, generator=g) for _ in range(batch)],), None


def export_case(name, family, kind, make, variant, out_dir):
    torch.manual_seed(SEED)
    entry = {"name": f"{name}_{variant}", "arch": name, "family": family, "variant": variant}
    try:
        model = make().eval()
    except Exception as e:  # torchvision cannot build it here (a download it insists on)
        entry["torch_error"] = f"building the model: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return entry
    entry["model"] = type(model).__name__
    args, ds = call_of(name, kind, 2)
    t0 = time.time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if variant == "dynamic" and ds is None:
                raise RuntimeError("no dynamic batch: the model takes a list of images")
            ep = torch.export.export(model, args, dynamic_shapes=ds if variant == "dynamic" else None)
            if variant == "decomposed":
                ep = ep.run_decompositions()
    except Exception as e:
        entry["torch_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        return entry
    path = os.path.join(out_dir, entry["name"] + ".pt2")
    torch.export.save(ep, path)

    def ref(a):
        loaded = torch.export.load(path)
        torch.manual_seed(SEED)
        with torch.no_grad():
            return corpus.leaves(loaded.module()(*a))

    io = {"args": args, "kwargs": {}, "outputs": ref(args), "seed": SEED, "after": {"state": {}, "inputs": []},
          "extra": []}
    if variant == "dynamic":
        for batch in (1, 3):
            a, _ = call_of(name, kind, batch)
            try:
                io["extra"].append({"args": a, "kwargs": {}, "outputs": ref(a)})
            except Exception as e:
                entry.setdefault("extra_refused_by_torch", []).append(f"batch {batch}: {type(e).__name__}: {e}")
    torch.save(io, os.path.join(out_dir, entry["name"] + ".io.pt"))
    entry["seconds"] = round(time.time() - t0, 2)
    return entry


def cache_key():
    import torchvision
    code = "".join(inspect.getsource(f) for f in (image_size, models, call_of, export_case, corpus.leaves))
    code += repr((FAMILIES, IMAGE_SIZE, SEED, os.environ.get("XPORT_CORPUS_FULL") == "1"))
    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    return f"torch-{torch.__version__}_torchvision-{torchvision.__version__}_{digest}"


def write_training(out_dir):
    """torchvision's ResNet-18 in train mode (BatchNorm on batch statistics), at batch 2 and 4 on
    224x224 images: the program, and one training step of the eager model (loss, gradients,
    running statistics after), which tests/test_corpus.cpp repeats through p.module()."""
    from torchvision import models as tvm
    os.makedirs(out_dir, exist_ok=True)
    for batch in (2, 4):
        torch.manual_seed(SEED)
        model = tvm.resnet18(weights=None).train()
        g = torch.Generator().manual_seed(batch)
        x = torch.randn(batch, 3, 224, 224, generator=g)
        target = torch.randint(0, 1000, (batch,), generator=g)
        name = f"resnet18_train_b{batch}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.export.save(torch.export.export(model, (x,)), os.path.join(out_dir, name + ".pt2"))
        loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()
        torch.save({"x": x, "target": target, "loss": loss.detach(),
                    "grads": {k: p.grad for k, p in model.named_parameters()},
                    "buffers": {k: b for k, b in model.named_buffers()}}, os.path.join(out_dir, name + ".step.pt"))
        print(f"{name}: eager loss {loss.item():.6f}", flush=True)


def write(root):
    corpus.write_cached(os.path.join(root, "tv"), cache_key(), models(), export_case)
    write_training(os.path.join(root, "tv_training"))


def read(root):
    """torch (this venv's) loads and runs every archive xport saved again from the tv corpus."""
    def run(module, call):
        with torch.no_grad():
            return corpus.leaves(module(*call["args"]))
    corpus.read_saved(os.path.join(root, "tv_xport_saved"), run)


if __name__ == "__main__":
    corpus.cli(write, read, __doc__)
