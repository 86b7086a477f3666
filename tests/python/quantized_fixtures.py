"""Quantized programs, as PT2E writes them (torchao's prepare_pt2e / convert_pt2e with its
XNNPACK and X86 quantizers, then torch.export): they call torch's `quantized_decomposed` operators, which
torch defines in Python only and <xport/quantized.hpp> defines in C++. Written by
pt2_fixtures.py (ctest `oracle_python_writes`) into the same index:

  - quantized_ops: a module calling every quantized_decomposed operator, so each C++ kernel is
    compared with torch's Python one, bit for bit, on the same call;
  - quantized_cnn / quantized_cnn_dynamic: a CNN with a linear head, static per-channel int8
    and dynamic (choose_qparams per call) quantization, run in every layout, printed and lowered
    as torch prints and lowers them; quantized_cnn_x86(_dynamic): the same by the X86 quantizer
    (uint8 activations);
  - quantized_resnet: transformers' ResNet (bottleneck blocks, BatchNorm folded into the convs
    by prepare_pt2e; random weights), static per-channel int8.
"""
import warnings

import torch
from torch import nn

import torch.ao.quantization.fx._decomposed  # noqa: F401  (defines torch.ops.quantized_decomposed)

qd = torch.ops.quantized_decomposed
Dim = torch.export.Dim


class EveryOp(nn.Module):
    """Each quantized_decomposed operator once, on tensors the test controls."""

    def forward(self, x, w, tokens, g):
        i8, u8 = torch.int8, torch.uint8
        out = []
        q = qd.quantize_per_tensor(x, 0.05, 3, -128, 127, i8)
        out += [q, qd.dequantize_per_tensor(q, 0.05, 3, -128, 127, i8)]
        s, z = qd.choose_qparams.tensor(x, -128, 127, 1e-5, i8)
        qt = qd.quantize_per_tensor.tensor(x, s, z, -128, 127, i8)
        out += [s, z, qt, qd.dequantize_per_tensor.tensor(qt, s, z, -128, 127, i8, out_dtype=torch.float32)]
        ss, zs = qd.choose_qparams_symmetric.tensor(x, 0, 255, 1e-5, u8)
        qu = qd.quantize_per_tensor.tensor2(x, ss, zs, torch.tensor(0), torch.tensor(255), u8)
        out += [ss, zs, qu, qd.dequantize_per_tensor.tensor2(qu, ss, zs, torch.tensor(0), torch.tensor(255), u8)]
        scales = w.abs().amax(dim=(0, 2)) / 127 + 1e-3
        zps = torch.tensor([0, 1, -2, 3, 0, -1])
        qc = qd.quantize_per_channel(w, scales, zps, 1, -128, 127, i8)
        out += [qc, qd.dequantize_per_channel(qc, scales, zps, 1, -128, 127, i8),
                qd.dequantize_per_channel(qc, scales, None, 1, -128, 127, i8, out_dtype=torch.float16),
                qd.fake_quant_per_channel(w, scales, zps, 1, -128, 127)]
        ts, tz = qd.choose_qparams_per_token(tokens, i8)
        ta, tza = qd.choose_qparams_per_token_asymmetric(tokens, i8)
        qtok = qd.quantize_per_token(tokens, ta, tza, -128, 127, i8)
        out += [ts, tz, ta, tza, qtok, qd.dequantize_per_token(qtok, ta, tza, -128, 127, i8, torch.float32),
                qd.quantize_per_token(tokens, ts, tz, -128, 127, i8)]
        gs = g.reshape(-1, 4).abs().amax(dim=1) / 7 + 1e-3
        gz = torch.zeros_like(gs, dtype=torch.int32)
        qg = qd.quantize_per_channel_group(g, gs, gz, -8, 7, i8, 4)
        out += [qg, qd.dequantize_per_channel_group(qg, gs, gz, -8, 7, i8, 4, torch.float32),
                qd.dequantize_per_channel_group(qg, gs, None, -8, 7, i8, 4, torch.bfloat16),
                qd.convert_element_type.no_fuse(x, torch.float16)]
        return tuple(out)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        h = torch.relu(self.conv1(x))
        h = torch.relu(self.conv2(h)) + h
        return self.head(self.pool(h).flatten(1))


def quantize(module, args, dynamic, dynamic_shapes=None, only=None, x86=False):
    """`module` through PT2E: exported, annotated by torchao's XNNPACK quantizer (per-channel
    symmetric weights; `only` a module type) or its X86 one (uint8 activations), calibrated on
    `args`, converted."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    if x86:
        import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as x86q
        quantizer = x86q.X86InductorQuantizer().set_global(x86q.get_default_x86_inductor_quantization_config(
            is_dynamic=dynamic))
    else:
        from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
        config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
        quantizer = XNNPACKQuantizer()
        quantizer = quantizer.set_module_type(only, config) if only else quantizer.set_global(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare_pt2e(torch.export.export(module, args, dynamic_shapes=dynamic_shapes).module(), quantizer)
        prepared(*args)
        return convert_pt2e(prepared)


def write(w):
    torch.manual_seed(0)
    x, wt, tokens, g = torch.randn(4, 6), torch.randn(5, 6, 3), torch.randn(2, 3, 8), torch.randn(3, 8)
    w.export("quantized_ops", EveryOp(), (x, wt, tokens, g), printed=True,
             extra=[((x * 3, wt.transpose(0, 2).contiguous().transpose(0, 2), tokens[:, :, :], -g), {})])

    torch.manual_seed(0)
    cnn, img = SmallCNN().eval(), torch.randn(2, 3, 8, 8)
    # another layout than the example's: a sliced input. Not channels_last: xport runs an input in
    # the layout the program was exported in (Note [Inputs in the exported layout]), where torch's
    # module runs the convolution on channels_last itself; the two convolutions round differently
    # in the last bit, and quantizing the result turns that bit, now and then, into one
    # quantization step (seen on an AMD EPYC / AVX2 machine: 2 of 10 outputs one step apart),
    # which no bit-for-bit check can hold. Float programs keep their channels_last calls.
    layouts = [((torch.randn(2, 3, 12, 8)[:, :, 2:10],), {})]
    static = quantize(cnn, (img,), dynamic=False)
    w.export("quantized_cnn", static, (img,), extra=layouts, printed=True, lowered=True)
    batch = ({0: Dim("batch", max=32)},)
    dynamic = quantize(cnn, (img,), dynamic=True, dynamic_shapes=batch)
    w.export("quantized_cnn_dynamic", dynamic, (img,), dynamic_shapes=batch,
             extra=layouts + [((torch.randn(7, 3, 8, 8),), {})], lowered="values")
    # ("values": torch's lowering names the residual add `add_20`, after the nodes its retrace
    # made and dropped; the code is otherwise the same)

    w.export("quantized_cnn_x86", quantize(cnn, (img,), dynamic=False, x86=True), (img,), extra=layouts)
    w.export("quantized_cnn_x86_dynamic", quantize(cnn, (img,), dynamic=True, x86=True), (img,), extra=layouts)

    import transformers
    torch.manual_seed(0)
    config = transformers.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                       layer_type="bottleneck", num_labels=5)
    resnet = transformers.ResNetForImageClassification(config).eval()
    pixels = torch.randn(2, 3, 32, 32)
    qresnet = quantize(resnet, (pixels,), dynamic=False)
    # (a sliced input; a channels_last one runs torch's convolutions in another order, whose last-bit
    # differences a quantize step can turn into a whole quantum: neither result is the wrong one)
    w.export("quantized_resnet", qresnet, (pixels,), extra=[((torch.randn(2, 3, 40, 32)[:, :, 4:36],), {})],
             lowered=True)
