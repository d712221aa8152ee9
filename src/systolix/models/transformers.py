"""Two small transformers, written node by node as torch's exporter spells hand-written attention.

``vit_tiny``: a 32x32x3 image, 4x4 patches (a stride-4 conv to dim 64, then
``Reshape -> Transpose`` to 64 tokens ``[1, 64, 64]``), a learned positional embedding, two
pre-norm blocks, a final LayerNorm, the mean over tokens and a 10-class head.
``bert_tiny``: an encoder over 32 token embeddings of dim 64 (``[1, 32, 64]``: the embedding
lookup stays with the user, as the model's input), an embedding LayerNorm, two post-norm blocks, then
BERT's pooler (the first token, a dense layer, Tanh) and a 10-class head.

Each attention block is the graph torch exports (opset 17) for::

    q = (x @ Wq + bq).reshape(1, T, H, Dh).transpose(1, 2)        # [1, H, T, Dh]
    k = (x @ Wk + bk).reshape(1, T, H, Dh).permute(0, 2, 3, 1)    # [1, H, Dh, T]
    v = (x @ Wv + bv).reshape(1, T, H, Dh).transpose(1, 2)        # [1, H, T, Dh]
    p = softmax(q @ k / sqrt(Dh), dim=-1)                         # [1, H, T, T]
    o = (p @ v).transpose(1, 2).reshape(1, T, D) @ Wo + bo        # [1, T, D]

with ``MatMul`` + ``Add`` for every linear layer, ``LayerNormalization`` (axis -1) and GeLU in its erf
form (``x * 0.5 * (1 + Erf(x / sqrt(2)))``). Weights are random (seeded): linear layers
``N(0, 1/fan_in)``, LayerNorm scales ``U(0.8, 1.2)`` and shifts ``N(0, 0.05)``, so activations stay
near unit scale, as a trained transformer's do after each LayerNorm.
"""

from __future__ import annotations

import numpy as np
import onnx

from systolix.models._common import finish
from systolix.models._graph import GraphBuilder, ModelBuildError

OPSET = 17  # LayerNormalization exists from opset 17
# Logits spread over a few units, as a trained classifier's: a near-tie under a few LSB is a coin flip
# for any fixed-point program, and with unit-scale logits 2% of inputs were such ties.
HEAD_GAIN = 8.0


class _Transformer:
    def __init__(self, b: GraphBuilder, dim: int, heads: int, tokens: int):
        if dim % heads:
            raise ModelBuildError(f"{b.name}: dim {dim} is not a multiple of heads {heads}")
        self.b, self.dim, self.heads, self.tokens = b, dim, heads, tokens

    def linear(self, x: str, n_in: int, n_out: int, name: str, gain: float = 1.0) -> str:
        b = self.b
        w = b.const(f"{name}_W", b.normal((n_in, n_out), np.sqrt(gain / n_in)))
        y = b.node("MatMul", [x, w], name=f"{name}_matmul")
        return b.node("Add", [y, b.const(f"{name}_B", b.normal((n_out,), 0.02))], name=f"{name}_add")

    def layer_norm(self, x: str, name: str) -> str:
        b = self.b
        scale = b.const(f"{name}_scale", b.uniform((self.dim,), 0.8, 1.2))
        shift = b.const(f"{name}_shift", b.normal((self.dim,), 0.05))
        return b.node("LayerNormalization", [x, scale, shift], name=name, axis=-1, epsilon=1e-5)

    def gelu(self, x: str, name: str) -> str:
        b = self.b
        d = b.node("Div", [x, b.const(f"{name}_sqrt2", np.float32(np.sqrt(2.0)))], name=f"{name}_div")
        e = b.node("Erf", [d], name=f"{name}_erf")
        a = b.node("Add", [e, b.const(f"{name}_one", np.float32(1.0))], name=f"{name}_add")
        m = b.node("Mul", [x, a], name=f"{name}_mul")
        return b.node("Mul", [m, b.const(f"{name}_half", np.float32(0.5))], name=f"{name}_mul_half")

    def attention(self, x: str, name: str) -> str:
        b, T, D, H = self.b, self.tokens, self.dim, self.heads
        dh = D // H
        heads_shape = b.const(f"{name}_heads_shape", np.asarray([1, T, H, dh]), dtype=np.int64)
        q, k, v = (b.node("Reshape", [self.linear(x, D, D, f"{name}_{p}"), heads_shape], name=f"{name}_{p}_reshape")
                   for p in "qkv")
        q = b.node("Transpose", [q], name=f"{name}_q_transpose", perm=[0, 2, 1, 3])
        k = b.node("Transpose", [k], name=f"{name}_k_transpose", perm=[0, 2, 3, 1])
        v = b.node("Transpose", [v], name=f"{name}_v_transpose", perm=[0, 2, 1, 3])
        s = b.node("MatMul", [q, k], name=f"{name}_scores")
        s = b.node("Div", [s, b.const(f"{name}_sqrt_dh", np.float32(np.sqrt(dh)))], name=f"{name}_scale")
        p = b.node("Softmax", [s], name=f"{name}_softmax", axis=-1)
        o = b.node("MatMul", [p, v], name=f"{name}_context")
        o = b.node("Transpose", [o], name=f"{name}_context_transpose", perm=[0, 2, 1, 3])
        o = b.node("Reshape", [o, b.const(f"{name}_tokens_shape", np.asarray([1, T, D]), dtype=np.int64)],
                   name=f"{name}_context_reshape")
        return self.linear(o, D, D, f"{name}_out")

    def mlp(self, x: str, hidden: int, name: str) -> str:
        h = self.gelu(self.linear(x, self.dim, hidden, f"{name}_fc1"), f"{name}_gelu")
        return self.linear(h, hidden, self.dim, f"{name}_fc2")

    def pre_norm_block(self, x: str, hidden: int, name: str) -> str:
        b = self.b
        x = b.node("Add", [x, self.attention(self.layer_norm(x, f"{name}_ln1"), f"{name}_attn")],
                   name=f"{name}_attn_residual")
        return b.node("Add", [x, self.mlp(self.layer_norm(x, f"{name}_ln2"), hidden, f"{name}_mlp")],
                      name=f"{name}_mlp_residual")

    def post_norm_block(self, x: str, hidden: int, name: str) -> str:
        b = self.b
        x = self.layer_norm(b.node("Add", [x, self.attention(x, f"{name}_attn")], name=f"{name}_attn_residual"),
                            f"{name}_ln1")
        return self.layer_norm(b.node("Add", [x, self.mlp(x, hidden, f"{name}_mlp")], name=f"{name}_mlp_residual"),
                               f"{name}_ln2")


def vit_tiny(opset: int = OPSET, seed: int = 0, image: int = 32, patch: int = 4, dim: int = 64, heads: int = 4, blocks: int = 2,
             classes: int = 10, mlp_ratio: int = 2, unit_scale: bool = False) -> onnx.ModelProto:
    """ViT-tiny: 32x32x3 input, 4x4 patches, dim 64, 4 heads, 2 pre-norm blocks, mean pooling, 10 classes.
    (``unit_scale`` is accepted as by every builder; there are no batch norms to fit.)"""
    if image % patch:
        raise ModelBuildError(f"vit_tiny: image size {image} is not a multiple of patch {patch}")
    b = GraphBuilder("vit_tiny", opset, seed)
    tokens = (image // patch) ** 2
    t = _Transformer(b, dim, heads, tokens)
    x = b.input("image", [1, 3, image, image], layout="NCHW")
    x = b.conv(x, dim, kernel=patch, stride=patch, gain=1.0, name="patch_embed", bias_std=0.02)
    x = b.node("Reshape", [x, b.const("patch_shape", np.asarray([1, dim, tokens]), dtype=np.int64)],
               name="patch_flatten")
    x = b.node("Transpose", [x], name="patch_transpose", perm=[0, 2, 1])
    x = b.node("Add", [x, b.const("position_embedding", b.normal((1, tokens, dim), 0.1))], name="position_add")
    for i in range(blocks):
        x = t.pre_norm_block(x, mlp_ratio * dim, f"block{i}")
    x = t.layer_norm(x, "final_ln")
    x = b.node("ReduceMean", [x], name="token_mean", axes=[1], keepdims=0)
    w = b.const("head_W", b.normal((dim, classes), np.sqrt(HEAD_GAIN / dim)))
    y = b.node("Gemm", [x, w, b.const("head_B", b.normal((classes,), 0.02))], name="head")
    b.output(y, "logits")
    return finish(b, f"ViT-tiny {image}x{image}x3, patch {patch}, dim {dim}, {heads} heads, {blocks} blocks, "
                  f"{classes} classes, random weights", kind="classifier", unit_scale=False)  # no batch norms: LayerNorm sets the scale


def bert_tiny(opset: int = OPSET, seed: int = 0, tokens: int = 32, dim: int = 64, heads: int = 4, blocks: int = 2, classes: int = 10,
              mlp_ratio: int = 4, unit_scale: bool = False) -> onnx.ModelProto:
    """BERT-tiny encoder: 32 token embeddings of dim 64 in, 2 post-norm blocks, 4 heads, pooler, 10 classes.
    (``unit_scale`` is accepted as by every builder; there are no batch norms to fit.)"""
    b = GraphBuilder("bert_tiny", opset, seed)
    t = _Transformer(b, dim, heads, tokens)
    x = b.input("embeddings", [1, tokens, dim], layout="NTC")
    x = t.layer_norm(x, "embedding_ln")
    for i in range(blocks):
        x = t.post_norm_block(x, mlp_ratio * dim, f"block{i}")
    first = b.node("Slice", [x, b.const("first_start", np.asarray([0]), dtype=np.int64),
                             b.const("first_end", np.asarray([1]), dtype=np.int64),
                             b.const("first_axis", np.asarray([1]), dtype=np.int64)], name="first_token")
    first = b.node("Reshape", [first, b.const("pooled_shape", np.asarray([1, dim]), dtype=np.int64)],
                   name="first_token_reshape")
    w = b.const("pooler_W", b.normal((dim, dim), np.sqrt(1.0 / dim)))
    pooled = b.node("Tanh", [b.node("Gemm", [first, w, b.const("pooler_B", b.normal((dim,), 0.02))], name="pooler")],
                    name="pooler_tanh")
    w = b.const("head_W", b.normal((dim, classes), np.sqrt(HEAD_GAIN / dim)))
    y = b.node("Gemm", [pooled, w, b.const("head_B", b.normal((classes,), 0.02))], name="head")
    b.output(y, "logits")
    return finish(b, f"BERT-tiny encoder, {tokens} tokens of dim {dim}, {heads} heads, {blocks} blocks, "
                  f"{classes} classes, random weights", kind="classifier", unit_scale=False)  # no batch norms: LayerNorm sets the scale
