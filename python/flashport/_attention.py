"""flashport.attention and flashport.plan: thin wrappers over flashport._C, which reads the
arrays through DLPack, builds the C descriptor and calls the library."""
from collections import namedtuple

from . import _C

Plan = namedtuple("Plan", "backend device kernel reason workspace_bytes")
Plan.__doc__ = """What flashport.plan found: the backend and device the call would run on, the
kernel variant that would run it (None when no variant can, the reason then naming the feature
missing), why, and the device scratch the call would allocate."""


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None,
              alibi_slopes=None, bias=None, sinks=None, cu_seqlens_q=None, cu_seqlens_kv=None,
              block_table=None, seqlens_kv=None, max_seqlen_q=None, max_seqlen_kv=None,
              return_lse=False, layout="bnhd", backend=None, kernel=None, out=None):
    """Exact attention softmax(scale * q k^T + modifiers) v, returned as an array of q's kind.

    q, k, v: arrays of one kind (NumPy, torch, CuPy, or any DLPack producer with out= given)
    and one dtype (float32, float16, bfloat16; float64 on the reference backend), on one
    device, read in place with any strides whose head dimension (the last) is contiguous. By
    layout:
      "bnhd" (default, as FlashAttention): q [B, Nq, Hq, d], k and v [B, Nkv, Hkv, d]
      "bhnd" (torch's scaled_dot_product_attention): q [B, Hq, Nq, d], k and v [B, Hkv, Nkv, d]
    Hq must be a multiple of Hkv (grouped-query attention).
    Packed sequences: with cu_seqlens_q (int32 [B + 1]) q is [total_q, Hq, d] ("bhnd":
    [Hq, total_q, d]); with cu_seqlens_kv, k and v likewise [total_kv, Hkv, d].
    Paged cache: with block_table (int32 [B, max_pages]) and seqlens_kv (int32 [B]), k and v are
    pages [num_pages, page_size, Hkv, d] ("bhnd": [num_pages, Hkv, page_size, d]).
    max_seqlen_q, max_seqlen_kv: the longest sequences; read from host tables when not given,
    and bounded by the packed rows (or max_pages * page_size) for GPU tables, which are never
    read back.

    causal: bottom-right aligned (key j visible to query i when j <= i + Nkv - Nq).
    scale: default 1/sqrt(d). window: (left, right) keys around the aligned diagonal, -1 for an
    unbounded side. softcap: s -> softcap * tanh(s / softcap). alibi_slopes: float32 [Hq] or
    [B, Hq]. bias: [B, Hq, Nq, Nkv] float32/float16/bfloat16 (float32/float64 for float64
    inputs), any dimension 1 to broadcast.
    sinks: float32 [Hq] logits that join every row's softmax denominator.

    return_lse: also return the float32 log-sum-exp, [B, Hq, Nq] ([Hq, total_q] when packed).
    backend: a spec such as "cpu_simd", "cuda:1" or "cpu_simd,reference". Arrays in GPU memory
    run on their device's backend (cuda, hip) on the caller's current stream, without
    synchronising; host arrays run on the spec given, else FLASHPORT_BACKEND, else the first
    available backend (a GPU backend copies host arrays in and out).
    kernel: force a kernel variant by name (else FLASHPORT_KERNEL, else the planner).
    out: write O into this array (q's shape and dtype, head dimension contiguous).

    Raises a flashport.Error subclass on failure; nothing is written then.
    """
    return _C.attention(q, k, v, causal, scale, window, softcap, alibi_slopes, bias, sinks,
                        cu_seqlens_q, cu_seqlens_kv, block_table, seqlens_kv, max_seqlen_q,
                        max_seqlen_kv, layout, backend, kernel, out, return_lse)


def plan(q, k, v, *, causal=False, scale=None, window=None, softcap=None, alibi_slopes=None,
         bias=None, sinks=None, cu_seqlens_q=None, cu_seqlens_kv=None, block_table=None,
         seqlens_kv=None, max_seqlen_q=None, max_seqlen_kv=None, layout="bnhd", backend=None,
         kernel=None):
    """Which kernel variant flashport.attention would run on these arguments, and why: a Plan.
    Nothing runs. When no variant can run the problem, Plan.kernel is None and Plan.reason
    names what is missing; other failures raise as attention does."""
    return Plan(*_C.plan(q, k, v, causal, scale, window, softcap, alibi_slopes, bias, sinks,
                         cu_seqlens_q, cu_seqlens_kv, block_table, seqlens_kv, max_seqlen_q,
                         max_seqlen_kv, layout, backend, kernel))
