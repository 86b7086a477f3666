"""Python modules that make the same ATen calls as LibTorch's C++ torch::nn modules.

The twins of the C++ test models (twins.py) are built from these wherever the C++ frontend
calls other ATen ops than Python's torch.nn does; each class names the C++ code it follows
and how it differs from its torch.nn namesake. docs/export.md's table "C++ frontend and Python
torch.nn" lists the same differences, and print_diff.py checks that the table and this module
agree and that every difference is real (the torch.nn module prints differently).
"""
import math

import torch
from torch import nn

# name -> (what the C++ frontend does, how torch.nn differs); docs/export.md's table, checked
DIFFERENCES = {}


def _difference(cpp, python):
    def register(cls):
        DIFFERENCES[cls.__name__] = (cpp, python)
        return cls
    return register


def linear(x, weight, bias):
    """torch::nn::functional::linear: addmm for a 2-D input with a bias, else matmul + add_."""
    if x.dim() == 2 and bias is not None:
        return torch.addmm(bias, x, weight.t())
    out = x.matmul(weight.t())
    if bias is not None:
        out += bias
    return out


@_difference("t + addmm (2-D input), t + matmul + add_ (otherwise)", "linear")
class Linear(nn.Linear):
    """torch::nn::Linear (torch/nn/functional/linear.h)."""

    def forward(self, x):
        return linear(x, self.weight, self.bias)


@_difference("batch_norm(..., cudnn_enabled=True)", "batch_norm(..., cudnn_enabled=False)")
class BatchNorm2d(nn.BatchNorm2d):
    """torch::nn::BatchNorm2d (torch/nn/modules/batchnorm.h, functional/batchnorm.h): passes
    at::globalContext().userEnabledCuDNN() (true unless switched off) as cudnn_enabled."""

    def forward(self, x):
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked += 1
        return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,
                                self.training or not self.track_running_stats, factor, self.eps, True)


def multi_head_attention(query, key, value, num_heads, in_proj_weight, in_proj_bias,
                         out_proj_weight, out_proj_bias, dropout_p, training, need_weights=True,
                         attn_mask=None, key_padding_mask=None, average_attn_weights=True):
    """torch::nn::functional::detail::multi_head_attention_forward, without bias_k/bias_v,
    add_zero_attn, separate projection weights or static keys (the C++ models use none)."""
    tgt_len, bsz, embed_dim = query.shape
    head_dim = embed_dim // num_heads
    scaling = 1 / math.sqrt(head_dim)
    # torch::equal(query, key): xport answers it from identity without recording an op
    if query is key and key is value:
        q, k, v = linear(query, in_proj_weight, in_proj_bias).chunk(3, -1)
    elif key is value:
        q = linear(query, in_proj_weight[0:embed_dim], in_proj_bias[0:embed_dim])
        k, v = linear(key, in_proj_weight[embed_dim:], in_proj_bias[embed_dim:]).chunk(2, -1)
    else:
        q = linear(query, in_proj_weight.slice(0, 0, embed_dim), in_proj_bias.slice(0, 0, embed_dim))
        k = linear(key, in_proj_weight.slice(0, embed_dim, 2 * embed_dim),
                   in_proj_bias.slice(0, embed_dim, 2 * embed_dim))
        v = linear(value, in_proj_weight.slice(0, 2 * embed_dim), in_proj_bias.slice(0, 2 * embed_dim))
    q = q * scaling
    q = q.contiguous().view(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    k = k.contiguous().view(-1, bsz * num_heads, head_dim).transpose(0, 1)
    v = v.contiguous().view(-1, bsz * num_heads, head_dim).transpose(0, 1)
    src_len = k.size(1)
    weights = torch.bmm(q, k.transpose(1, 2))
    if attn_mask is not None:
        weights += attn_mask.unsqueeze(0)
    if key_padding_mask is not None:
        weights = weights.view(bsz, num_heads, tgt_len, src_len)
        weights = weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf"))
        weights = weights.view(bsz * num_heads, tgt_len, src_len)
    weights = torch.softmax(weights, -1)
    weights = torch.dropout(weights, dropout_p, training)
    out = torch.bmm(weights, v)
    out = out.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
    out = linear(out, out_proj_weight, out_proj_bias)
    if not need_weights:
        return out, None
    weights = weights.view(bsz, num_heads, tgt_len, src_len)
    if average_attn_weights:
        weights = weights.sum(1) / num_heads
    return out, weights


@_difference("projections, scaling, bmm, softmax and dropout written out in C++ "
             "(multi_head_attention_forward of torch/nn/functional/activation.h)",
             "_native_multi_head_attention or scaled_dot_product_attention through "
             "torch.nn.functional.multi_head_attention_forward")
class MultiheadAttention(nn.Module):
    """torch::nn::MultiheadAttention (torch/nn/modules/activation.h)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim))
        self.out_proj = Linear(embed_dim, embed_dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.in_proj_bias)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None):
        return multi_head_attention(query, key, value, self.num_heads, self.in_proj_weight, self.in_proj_bias,
                                    self.out_proj.weight, self.out_proj.bias, self.dropout, self.training,
                                    need_weights, attn_mask, key_padding_mask)


@_difference("layer_norm(..., cudnn_enable=True)", "layer_norm(..., eps, cudnn_enable=False)")
class LayerNorm(nn.LayerNorm):
    """torch::nn::LayerNorm (torch/nn/functional/normalization.h): eps and cudnn_enable left at
    their defaults."""

    def forward(self, x):
        return torch.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps, True)


@_difference("self-attention block, then dropout, add, LayerNorm; GELU feed-forward with C++ linears",
             "the same blocks, or the fused _transformer_encoder_layer_fwd in eval mode")
class TransformerEncoderLayer(nn.Module):
    """torch::nn::TransformerEncoderLayer (post-norm, as the C++ module is)."""

    def __init__(self, d_model, nhead, dim_feedforward, dropout, activation):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout)
        self.linear1 = Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = activation

    def forward(self, src, src_mask=None, src_key_padding_mask=None):
        src2 = self.self_attn(src, src, src, src_key_padding_mask, True, src_mask)[0]
        ret = self.norm1(src + self.dropout1(src2))
        src2 = self.linear2(self.dropout(self.activation(self.linear1(ret))))
        return self.norm2(ret + self.dropout2(src2))


def _probe(mirror, python, *shape):
    return (mirror, python, (torch.randn(*shape),))


class _Attention(nn.Module):
    """MultiheadAttention called as self-attention, returning its output only."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x, x, x)[0]


# name -> (the mirror, its torch.nn namesake, an input): print_diff.py checks they call other ops
PROBES = {
    "Linear": _probe(lambda: Linear(8, 4), lambda: nn.Linear(8, 4), 2, 8),
    "BatchNorm2d": _probe(lambda: BatchNorm2d(3).eval(), lambda: nn.BatchNorm2d(3).eval(), 2, 3, 4, 4),
    "LayerNorm": _probe(lambda: LayerNorm(8), lambda: nn.LayerNorm(8), 2, 8),
    "MultiheadAttention": _probe(lambda: _Attention(MultiheadAttention(8, 2)).eval(),
                                 lambda: _Attention(nn.MultiheadAttention(8, 2)).eval(), 3, 2, 8),
    "TransformerEncoderLayer": _probe(
        lambda: TransformerEncoderLayer(8, 2, 16, 0.1, torch.nn.functional.gelu).eval(),
        lambda: nn.TransformerEncoderLayer(8, 2, 16, 0.1, activation=torch.nn.functional.gelu).eval(), 3, 2, 8),
}
