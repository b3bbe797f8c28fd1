"""flashport.torch.attention: flashport's attention as a differentiable torch operation.

    import flashport.torch
    o = flashport.torch.attention(q, k, v, causal=True)    # q, k, v: torch tensors [B, N, H, d]
    o.sum().backward()                                       # q.grad, k.grad, v.grad

The forward pass keeps O and the log-sum-exp; the backward pass hands them, with the incoming
gradient, to the library's backward call (flashport_attention_backward), which writes dQ, dK
and dV. Backends without a backward pass (HIP, today) and features it declines (paged
K/V) raise flashport.UnsupportedError from loss.backward(), naming what is missing.
"""
import torch

from . import _C


def _dense(x):
    """x itself when a tensor like it (torch.empty_like) has its strides, else a contiguous
    copy: the library writes each gradient by its input's strides, which must then address
    distinct elements (an expanded or sliced view does not)."""
    return x if torch.empty_like(x).stride() == x.stride() else x.contiguous()


class _Attention(torch.autograd.Function):
    """Inputs: q, k, v, then the tensor options (which get no gradient), then a tuple of the
    other options in _C's order."""

    @staticmethod
    def forward(ctx, q, k, v, alibi_slopes, bias, sinks, cu_seqlens_q, cu_seqlens_kv,
                block_table, seqlens_kv, options):
        causal, scale, window, softcap, max_q, max_kv, layout, backend, kernel, det = options
        tensors = (alibi_slopes, bias, sinks, cu_seqlens_q, cu_seqlens_kv, block_table,
                   seqlens_kv)
        ctx.call_options = (causal, scale, window, softcap) + tensors + (
            max_q, max_kv, layout, backend, kernel)
        ctx.deterministic = det
        o, lse = _C.attention(q, k, v, *ctx.call_options, None, True)
        # The options' tensors go through save_for_backward too, so that autograd notices
        # any change made to them in place before the backward pass.
        ctx.save_for_backward(q, k, v, o, lse, *(t for t in tensors if t is not None))
        ctx.mark_non_differentiable(lse)
        return o

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_o):
        q, k, v, o, lse = ctx.saved_tensors[:5]
        if grad_o.stride() != o.stride() or grad_o.dtype != o.dtype:
            # the library reads dO in O's dtype, by O's strides
            grad_o = torch.empty_like(o).copy_(grad_o)
        dq, dk, dv = _C.backward(_dense(q), _dense(k), _dense(v), o, lse, grad_o,
                                 *ctx.call_options, ctx.deterministic, None, None, None)
        return (dq, dk, dv) + (None,) * 8


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None,
              alibi_slopes=None, bias=None, sinks=None, cu_seqlens_q=None, cu_seqlens_kv=None,
              block_table=None, seqlens_kv=None, max_seqlen_q=None, max_seqlen_kv=None,
              layout="bnhd", backend=None, kernel=None, deterministic=False):
    """flashport.attention on torch tensors, differentiable with respect to q, k and v.

    The arguments are those of flashport.attention (no out= or return_lse). The backward pass
    runs on the backend the forward pass was given; deterministic=True asks it for the same
    bits of dQ, dK and dV on every run. alibi_slopes, bias and sinks receive no gradient.
    A paged cache (block_table) runs forward, but its backward pass is declined by the library
    (flashport.UnsupportedError). Errors raise as in flashport.attention.
    """
    options = (causal, scale, window, softcap, max_seqlen_q, max_seqlen_kv, layout, backend,
               kernel, deterministic)
    return _Attention.apply(q, k, v, alibi_slopes, bias, sinks, cu_seqlens_q, cu_seqlens_kv,
                            block_table, seqlens_kv, options)
