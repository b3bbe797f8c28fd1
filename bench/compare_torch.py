#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention on flashport-bench's shapes, for each SDPA
backend (flash, efficient, cudnn, math), an unfused matmul baseline (Q K^T, softmax, P V) and,
where the fa3-fwd package is installed, FlashAttention-3's forward (--impl fa3),
optionally running flashport-bench in the same run, and writes flashport-bench's JSON schema
(one record per shape and implementation) with a side-by-side table of ratios.

With --backward it times the backward pass instead: autograd through each implementation's
forward (recorded once per input set, outside the timing), torch.autograd.grad for dQ, dK, dV
from a random dO, FLOPs counted as 2.5x the forward's (flashport-bench --backward's count).

PyTorch is needed only here; nothing in flashport's build or tests uses this script.
The shape lists mirror flashport-bench's presets (bench/bench_presets.c)."""
import argparse
import contextlib
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

SCHEMA = "flashport-bench/1"
PRESETS = ["seed", "fa-grid", "ladder", "decode", "cpu", "serve", "cpu-decode", "varlen"]
IMPLEMENTATIONS = ["flash", "efficient", "cudnn", "math", "unfused", "fa3", "flashport"]
OPT_IN = ("fa3", "flashport")  # left out of the default --impl
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
IMPL_DESCRIPTIONS = {
    "flash": "torch SDPA, FlashAttention-2 backend",
    "efficient": "torch SDPA, memory-efficient (xformers) backend",
    "cudnn": "torch SDPA, cuDNN backend",
    "math": "torch SDPA, math (composite) backend",
    "unfused": "Q K^T, softmax, P V as separate torch operations",
    "fa3": "FlashAttention-3 (the fa3-fwd package: Hopper, forward only)",
    "flashport": "flashport through its Python package (flashport.torch.attention on the same "
                 "tensors, the caller's stream)",
}
EXIT_UNAVAILABLE = 3  # as flashport-bench: what the run needs is not there


def shape(b, hq, hkv, nq, nkv, d, dtype, causal, layout="bhnd", page_size=0, kv_mixed=False,
          window=(-1, -1), varlen=False):
    return dict(batch=b, heads_q=hq, heads_kv=hkv, seq_q=nq, seq_kv=nkv, head_dim=d, dtype=dtype,
                causal=bool(causal), layout=layout, page_size=page_size, kv_mixed=kv_mixed,
                window_left=window[0], window_right=window[1], varlen=bool(varlen))


def splitmix64(state):
    """flashport-bench's generator (bench_shape.c): (next state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return state, z ^ (z >> 31)


def varlen_lengths(s, seed):
    """The sequence lengths flashport-bench draws for a packed shape from the same seed:
    Lq from 1..Nq and Lkv = Lq + Nkv - Nq, per sequence."""
    state, out = seed ^ 0x5EED1E57, []
    for _ in range(s["batch"]):
        state, z = splitmix64(state)
        lq = 1 + z % s["seq_q"]
        out.append((lq, lq + s["seq_kv"] - s["seq_q"]))
    return out


def preset_shapes(name, dtype_default):
    """The same lists, in the same order, as flashport-bench's --preset."""
    if name == "seed":
        return [shape(1, 1, 1, 1024, 1024, 1024, "f32", 0)]
    if name == "ladder":
        return [shape(1, 1, 1, 1024, 1024, 1024, "f32", 0),
                shape(16, 16, 16, 1024, 1024, 128, "f32", 0)]
    if name == "fa-grid":
        out = []
        for c in (0, 1):
            for d in (64, 128, 256):
                n = 512
                while n <= 16384:
                    out.append(shape(16384 // n, 2048 // d, 2048 // d, n, n, d, dtype_default, c))
                    n *= 2
        return out
    if name == "decode":
        return [shape(1, 32, hkv, 1, kv, 128, dtype_default, 0)
                for hkv in (8, 32) for kv in (4096, 32768, 131072)]
    if name == "cpu":
        return [shape(1, 1, 1, n, n, d, "f32", c)
                for c in (0, 1) for d in (64, 128) for n in (512, 1024, 2048, 4096)]
    if name == "serve":
        # torch runs the contiguous, padded equivalent of each paged batch (see Torch.measure)
        return ([shape(b, 32, 8, 1, 32768, 128, dtype_default, 0, page_size=16, kv_mixed=True)
                 for b in (1, 8, 32, 64)]
                + [shape(8, 32, 8, 4, 8192, 128, dtype_default, 1, page_size=16, kv_mixed=True),
                   shape(4, 32, 8, 512, 8192, 128, dtype_default, 1, page_size=16),
                   shape(1, 32, 8, 32768, 32768, 128, dtype_default, 1, window=(4095, 0))])
    if name == "varlen":
        return [shape(16, 2048 // d, 2048 // d, 8192, 8192, d, dtype_default, c, varlen=True)
                for c in (0, 1) for d in (64, 128)]
    if name == "cpu-decode":
        return ([shape(1, 32, 8, nq, kv, 128, dtype_default, 0)
                 for nq in (1, 4, 16) for kv in (32768, 131072)]
                + [shape(1, 32, 32, nq, 32768, 128, dtype_default, 0) for nq in (1, 4, 16)])
    raise ValueError(name)


def shapes_from_args(a):
    dtype_default = "f32" if a.device == "cpu" else "bf16"
    if a.preset:
        out = preset_shapes(a.preset, dtype_default)
        for s in out:
            if a.dtype:
                s["dtype"] = a.dtype
            s["layout"] = a.layout
        return out
    return [shape(a.b, a.hq, a.hkv or a.hq, a.nq, a.nkv or a.nq, a.d, a.dtype or "f32",
                  a.causal, a.layout, varlen=a.varlen)]


def shape_key(s):
    return (tuple(s[k] for k in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim",
                                 "dtype", "causal", "layout"))
            + (s.get("page_size", 0), bool(s.get("kv_mixed", False)), s.get("window_left", -1),
               s.get("window_right", -1), bool(s.get("varlen", False))))


def tensor_bytes(s, lengths=None):
    """Bytes of one Q, one of K and V together, and O: the whole (padded) tensors, or a packed
    batch's real rows."""
    q_rows, kv_rows = ((sum(x for x, _ in lengths), sum(y for _, y in lengths)) if lengths
                       else (s["batch"] * s["seq_q"], s["batch"] * s["seq_kv"]))
    row = DTYPE_BYTES[s["dtype"]] * s["head_dim"]
    q = row * s["heads_q"] * q_rows
    return q, 2 * row * s["heads_kv"] * kv_rows, q



def sequence_flops(s, lq, lkv):
    """flashport_attention_desc_flops of one sequence: 4 d Hq per visible pair, square causal
    counted as half the square, other causal shapes exactly (bottom-right aligned)."""
    if s["causal"] and lq != lkv:
        pairs = sum(max(0, min(lkv, i + lkv - lq + 1)) for i in range(lq))
    else:
        pairs = lq * lkv / (2 if s["causal"] else 1)
    return 4.0 * s["heads_q"] * s["head_dim"] * pairs


def flops(s, backward=False, lengths=None):
    """FLOPs of the shape, on real tokens for a packed batch (its drawn lengths)."""
    if lengths:
        f = sum(sequence_flops(s, lq, lkv) for lq, lkv in lengths)
    else:
        f = s["batch"] * sequence_flops(s, s["seq_q"], s["seq_kv"])
    return 2.5 * f if backward else f


def shape_text(s):
    w = (f" window={s['window_left']},{s['window_right']}"
         if s.get("window_left", -1) >= 0 or s.get("window_right", -1) >= 0 else "")
    return (f"{s['dtype']} B={s['batch']} Hq={s['heads_q']} Hkv={s['heads_kv']} Nq={s['seq_q']} "
            f"Nkv={s['seq_kv']} d={s['head_dim']}{' causal' if s['causal'] else ''}"
            f"{' bnhd' if s['layout'] == 'bnhd' else ''}{w}"
            f"{' page=%d' % s['page_size'] if s.get('page_size') else ''}"
            f"{' varlen' if s.get('varlen') else ''}"
            f"{' kvmix' if s.get('kv_mixed') else ''}")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=PRESETS)
    ap.add_argument("--b", type=int, default=1)
    ap.add_argument("--hq", type=int, default=1)
    ap.add_argument("--hkv", type=int, default=0, help="default: --hq")
    ap.add_argument("--nq", type=int, default=1024)
    ap.add_argument("--nkv", type=int, default=0, help="default: --nq")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", choices=list(DTYPE_BYTES),
                    help="default f32; fa-grid and decode: bf16 on cuda, f32 on cpu")
    ap.add_argument("--causal", action="store_true", help="bottom-right aligned, as flashport")
    ap.add_argument("--varlen", action="store_true",
                    help="a packed batch with flashport-bench's drawn lengths (--seed); torch "
                         "runs it as nested (jagged) tensors")
    ap.add_argument("--layout", choices=["bhnd", "bnhd"], default="bhnd")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (cpu)")
    ap.add_argument("--impl", default=",".join(i for i in IMPLEMENTATIONS if i not in OPT_IN),
                    help="comma-separated subset of " + ",".join(IMPLEMENTATIONS)
                    + " (default: all but fa3, FlashAttention-3 from the fa3-fwd package, and "
                    "flashport, the flashport Python package timed like the torch "
                    "implementations, with --backend and --kernel)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--queue", type=int, default=1,
                    help="calls queued back to back per timed sample, as flashport-bench's "
                         "--queue (cuda)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--flashport-bench", metavar="PATH",
                    help="also run this flashport-bench on the same shapes")
    ap.add_argument("--backend",
                    help="flashport-bench --backend, and the package's backend= (default: "
                         "their own)")
    ap.add_argument("--kernel", help="flashport-bench --kernel NAME|all, and the package's "
                                     "kernel= (a name)")
    ap.add_argument("--flashport-args", default="",
                    help="more flashport-bench arguments, one string (e.g. '--no-peaks' or "
                         "'--threads 2')")
    ap.add_argument("--json", metavar="FILE",
                    help="write every record as JSON (rewritten after each shape, with "
                         "\"complete\": false until the last, so a run cut short keeps what it "
                         "measured)")
    ap.add_argument("--backward", action="store_true",
                    help="time the backward pass (dQ, dK, dV), here and in flashport-bench")
    ap.add_argument("--list-shapes", action="store_true",
                    help="print the shapes and exit (needs no PyTorch)")
    # argparse would read a lone flag given as the value ("--flashport-args --no-peaks") as an
    # option of this script: the value is glued to its option first.
    argv = list(argv)
    for i in range(len(argv) - 1):
        if argv[i] == "--flashport-args":
            argv[i:i + 2] = ["--flashport-args=" + argv[i + 1]]
            break
    a = ap.parse_args(argv)
    impls = [i for i in a.impl.split(",") if i]
    bad = [i for i in impls if i not in IMPLEMENTATIONS]
    if bad:
        ap.error(f"unknown implementation(s) {bad}; choose from {IMPLEMENTATIONS}")
    a.impls = impls
    for name in ("b", "hq", "nq", "d", "repeat"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if a.warmup < 0 or a.threads < 0 or a.hkv < 0 or a.nkv < 0:
        ap.error("--warmup, --threads, --hkv and --nkv must not be negative")
    if a.hq % (a.hkv or a.hq):
        ap.error(f"--hq {a.hq} is not a multiple of --hkv {a.hkv}")
    return a


# ---------------------------------------------------------------------------------------------
# flashport-bench in the same run
# ---------------------------------------------------------------------------------------------
def flashport_command(a, json_path):
    cmd = [a.flashport_bench, "--json", json_path, "--warmup", str(a.warmup),
           "--repeat", str(a.repeat), "--queue", str(a.queue), "--layout", a.layout,
           "--seed", str(a.seed)]
    if a.preset:
        cmd += ["--preset", a.preset]
    elif a.varlen:
        cmd += ["--shape", shape_text(shapes_from_args(a)[0])]
    else:
        cmd += ["--b", str(a.b), "--hq", str(a.hq), "--hkv", str(a.hkv or a.hq), "--nq", str(a.nq),
                "--nkv", str(a.nkv or a.nq), "--d", str(a.d)]
        if a.causal:
            cmd.append("--causal")
    if a.dtype or not a.preset:
        cmd += ["--dtype", a.dtype or "f32"]
    if a.backend:
        cmd += ["--backend", a.backend]
    if a.kernel:
        cmd += ["--kernel", a.kernel]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    if a.backward:
        cmd.append("--backward")
    return cmd + a.flashport_args.split()


def run_flashport(a):
    fd, path = tempfile.mkstemp(suffix=".json", prefix="flashport-bench-")
    os.close(fd)
    try:
        cmd = flashport_command(a, path)
        print("running:", " ".join(cmd), file=sys.stderr)
        rc = subprocess.run(cmd).returncode
        if rc not in (0, 1):
            sys.exit(f"compare_torch.py: flashport-bench exited {rc}")
        with open(path) as f:
            return json.load(f), rc
    finally:
        os.unlink(path)


# ---------------------------------------------------------------------------------------------
# PyTorch
# ---------------------------------------------------------------------------------------------
class Torch:
    def __init__(self, a):
        try:
            import torch
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError as e:
            print(f"compare_torch.py: PyTorch is needed ({e}); see the README for the CPU build",
                  file=sys.stderr)
            sys.exit(EXIT_UNAVAILABLE)
        self.torch, self.sdpa_kernel = torch, sdpa_kernel
        self.backends = {"flash": SDPBackend.FLASH_ATTENTION,
                         "efficient": SDPBackend.EFFICIENT_ATTENTION,
                         "math": SDPBackend.MATH}
        if hasattr(SDPBackend, "CUDNN_ATTENTION"):
            self.backends["cudnn"] = SDPBackend.CUDNN_ATTENTION
        try:
            from torch.nn.attention.bias import causal_lower_right
            self.causal_lower_right = causal_lower_right
        except ImportError:
            self.causal_lower_right = None
        # enable_gqa (torch >= 2.5) lets SDPA read K/V heads shared by several query heads.
        try:
            q, kv = torch.zeros(1, 2, 1, 8), torch.zeros(1, 1, 1, 8)
            torch.nn.functional.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
            self.has_enable_gqa = True
        except (TypeError, RuntimeError):
            self.has_enable_gqa = False
        self.device, self.backward = a.device, a.backward
        self.fp_backend = a.backend
        self.fp_kernel = a.kernel if a.kernel != "all" else None
        self.fp_plan = None
        if a.device == "cuda" and not torch.cuda.is_available():
            print("compare_torch.py: torch.cuda is not available (use --device cpu)",
                  file=sys.stderr)
            sys.exit(EXIT_UNAVAILABLE)
        if a.threads:
            torch.set_num_threads(a.threads)
        self.dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
        self.cache_bytes = 64 << 20
        if a.device == "cuda":
            props = torch.cuda.get_device_properties(0)
            self.cache_bytes = getattr(props, "L2_cache_size", 0) or self.cache_bytes

    def device_info(self):
        t = self.torch
        if self.device == "cuda":
            p = t.cuda.get_device_properties(0)
            return dict(name=p.name, vendor="NVIDIA" if t.version.cuda else "AMD", kind="gpu",
                        memory_bytes=p.total_memory, compute_units=p.multi_processor_count,
                        details=f"torch_cuda={t.version.cuda}; "
                                f"matmul_allow_tf32={t.backends.cuda.matmul.allow_tf32}")
        name = platform.processor()
        try:
            with open("/proc/cpuinfo") as f:
                name = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
        except (OSError, StopIteration):
            pass
        return dict(name=name, vendor="", kind="cpu", memory_bytes=0,
                    compute_units=os.cpu_count() or 0,
                    details=f"torch_threads={t.get_num_threads()}")

    def sets_for(self, s):
        """Same rule as flashport-bench: rotate inputs that would sit in cache."""
        q_bytes, kv_bytes, _ = tensor_bytes(s)
        set_bytes = q_bytes + kv_bytes
        if set_bytes >= 4 * self.cache_bytes:
            return 1
        n = min(64, max(2, -(-2 * self.cache_bytes // set_bytes)))
        while n > 2 and n * set_bytes > (512 << 20):
            n -= 1
        return n

    def tensor(self, s, heads, seq, gen):
        t = self.torch
        # Drawn on the device itself: the serve preset's padded batches are gigabytes.
        dims = (s["batch"], seq, heads, s["head_dim"]) if s["layout"] == "bnhd" else \
            (s["batch"], heads, seq, s["head_dim"])
        x = t.randn(*dims, generator=gen, device=self.device).to(self.dtypes[s["dtype"]])
        return x.transpose(1, 2) if s["layout"] == "bnhd" else x

    def jagged(self, s, heads, lengths, gen):
        """A packed batch as a nested (jagged) tensor [B, heads, j, d]: one sequence each."""
        t = self.torch
        values = t.randn(sum(lengths), heads, s["head_dim"], generator=gen,
                         device=self.device).to(self.dtypes[s["dtype"]])
        offsets = t.tensor([0] + lengths, device=self.device).cumsum(0)
        return t.nested.nested_tensor_from_jagged(values, offsets).transpose(1, 2)

    def inputs(self, s, n_sets, seed):
        gen = self.torch.Generator(device=self.device).manual_seed(seed)
        if s.get("varlen"):
            lengths = varlen_lengths(s, seed)
            lq, lkv = [x for x, _ in lengths], [y for _, y in lengths]
            return [(self.jagged(s, s["heads_q"], lq, gen), self.jagged(s, s["heads_kv"], lkv, gen),
                     self.jagged(s, s["heads_kv"], lkv, gen)) for _ in range(n_sets)]
        return [(self.tensor(s, s["heads_q"], s["seq_q"], gen),
                 self.tensor(s, s["heads_kv"], s["seq_kv"], gen),
                 self.tensor(s, s["heads_kv"], s["seq_kv"], gen)) for _ in range(n_sets)]

    def bottom_right_mask(self, s):
        """Boolean [Nq, Nkv]: key j visible to query i when j <= i + (Nkv - Nq)."""
        t = self.torch
        i = t.arange(s["seq_q"], device=self.device).unsqueeze(1)
        j = t.arange(s["seq_kv"], device=self.device).unsqueeze(0)
        return j <= i + (s["seq_kv"] - s["seq_q"])

    def callable_for(self, impl, s):
        """A function (q, k, v) -> O, the context it runs in (the SDPA backend choice, entered
        once around all timed calls so that it adds no host time to them), and a note."""
        t = self.torch
        F = t.nn.functional
        group = s["heads_q"] // s["heads_kv"]
        note = []

        def expand(k, v):
            if group == 1:
                return k, v
            return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)

        if impl == "unfused":
            scale = s["head_dim"] ** -0.5
            mask = self.bottom_right_mask(s) if s["causal"] else None

            def unfused(q, k, v):
                k, v = expand(k, v)
                scores = (q @ k.transpose(-2, -1)) * scale
                if mask is not None:
                    scores = scores.masked_fill(~mask, float("-inf"))
                return scores.softmax(dim=-1) @ v
            if group > 1:
                note.append("K/V repeated per query head")
            return unfused, contextlib.nullcontext(), "; ".join(note)

        if s.get("varlen"):
            return self.nested_callable(impl, s)
        if impl == "fa3":
            return self.fa3_callable(s)
        if impl == "flashport":
            return self.flashport_callable(s)
        if s.get("window_left", -1) >= 0 or s.get("window_right", -1) >= 0:
            raise NotImplementedError("SDPA has no sliding window")
        if s.get("page_size") or s.get("kv_mixed"):
            note.append(f"contiguous K/V padded to Nkv={s['seq_kv']} (torch has no paged cache)")
        kwargs = {}
        if s["causal"]:
            if s["seq_q"] == s["seq_kv"]:
                kwargs["is_causal"] = True
            elif self.causal_lower_right is not None:
                kwargs["attn_mask"] = self.causal_lower_right(s["seq_q"], s["seq_kv"])
            else:
                raise NotImplementedError("this torch has no bottom-right causal mask")
        gqa = group > 1
        if gqa and self.has_enable_gqa:
            kwargs["enable_gqa"] = True
            note.append("enable_gqa")
            gqa = False
        elif gqa:
            note.append("K/V repeated per query head (no enable_gqa in this torch)")
        backend = self.backends.get(impl)
        if backend is None:
            raise NotImplementedError(f"this torch has no SDPA backend '{impl}'")

        def fused(q, k, v):
            if gqa:
                k, v = expand(k, v)
            return F.scaled_dot_product_attention(q, k, v, **kwargs)
        return fused, self.sdpa_kernel(backend), "; ".join(note)

    def nested_callable(self, impl, s):
        """A packed batch through SDPA on nested (jagged) tensors, torch's varlen path: each
        sequence sees only its own keys. Causal needs Lq = Lkv (torch aligns top-left)."""
        if impl == "flashport":
            raise NotImplementedError("paged and packed batches: time them with flashport-bench")
        if impl not in self.backends:
            raise NotImplementedError(f"packed batches are timed through SDPA's nested tensors "
                                      f"only, not {impl}")
        if s["heads_q"] != s["heads_kv"]:
            raise NotImplementedError("nested tensors: GQA is not timed")
        if s["causal"] and s["seq_q"] != s["seq_kv"]:
            raise NotImplementedError("nested tensors: causal needs equal query and key lengths")
        F = self.torch.nn.functional

        def nested(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=s["causal"])
        return nested, self.sdpa_kernel(self.backends[impl]), "nested (jagged) tensors"

    def fa3_callable(self, s):
        """FlashAttention-3's forward from the fa3-fwd package. It takes [B, N, H, d] with the
        head dimension contiguous (a transposed view of SDPA's layout serves), reads GQA's
        shared K/V heads itself, and aligns causal masks bottom-right as flashport does."""
        if self.backward:
            raise NotImplementedError("the fa3-fwd package has no backward pass")
        if self.device != "cuda":
            raise NotImplementedError("FlashAttention-3 runs on Hopper GPUs only")
        if (s.get("window_left", -1) >= 0 or s.get("window_right", -1) >= 0
                or s.get("page_size") or s.get("kv_mixed")):
            raise NotImplementedError("windows and paged batches are not timed with fa3")
        try:
            import fa3_fwd_interface
        except ImportError as e:
            raise NotImplementedError(f"FlashAttention-3 is not installed "
                                      f"(pip install fa3-fwd einops): {e}")

        def fa3(q, k, v):
            r = fa3_fwd_interface.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2),
                                                  v.transpose(1, 2), causal=s["causal"])
            return (r[0] if isinstance(r, tuple) else r).transpose(1, 2)
        return fa3, contextlib.nullcontext(), "fa3-fwd package"

    def flashport_callable(self, s):
        """flashport.torch.attention on the same [B, H, N, d] tensors (any strides), with the
        shape's features; autograd records it for --backward. Dense batches only: paged and
        packed ones are flashport-bench's to time."""
        try:
            import flashport
            import flashport.torch as fpt
        except ImportError as e:
            raise NotImplementedError(f"the flashport package is not importable ({e})")
        if s.get("page_size") or s.get("kv_mixed") or s.get("varlen"):
            raise NotImplementedError("paged and packed batches: time them with flashport-bench")
        opts = dict(layout="bhnd", causal=bool(s["causal"]))
        if s.get("window_left", -1) >= 0 or s.get("window_right", -1) >= 0:
            opts["window"] = (s.get("window_left", -1), s.get("window_right", -1))
        if s.get("softcap"):
            opts["softcap"] = s["softcap"]
        if s.get("alibi"):  # flashport-bench's slopes: 2^(-8 (h + 1) / Hq)
            h = self.torch.arange(1, s["heads_q"] + 1, device=self.device, dtype=self.torch.float32)
            opts["alibi_slopes"] = 2.0 ** (-8.0 * h / s["heads_q"])
        if self.fp_backend:
            opts["backend"] = self.fp_backend
        if self.fp_kernel:
            opts["kernel"] = self.fp_kernel
        q, k, v = self.inputs(dict(s, batch=1), 1, 0)[0]
        try:
            plan = flashport.plan(q, k, v, **opts)
        except flashport.Error as e:
            raise NotImplementedError(str(e))
        if plan.kernel is None:
            raise NotImplementedError(plan.reason)
        self.fp_plan = plan

        def attention(q, k, v):
            return fpt.attention(q, k, v, **opts)
        return attention, contextlib.nullcontext(), f"{plan.backend}/{plan.kernel}"

    def time(self, fn, sets, warmup, repeat, queue=1):
        t = self.torch
        for i in range(warmup):
            fn(*sets[i % len(sets)])
        if self.device == "cuda":
            t.cuda.synchronize()
        ms = []
        for i in range(repeat):
            q, k, v = sets[(warmup + i) % len(sets)]
            if self.device == "cuda":
                start, stop = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
                start.record()
                for n in range(queue):
                    fn(*sets[(warmup + i * queue + n) % len(sets)])
                stop.record()
                stop.synchronize()
                ms.append(start.elapsed_time(stop) / queue)
            else:
                t0 = time.perf_counter_ns()
                fn(q, k, v)
                ms.append((time.perf_counter_ns() - t0) / 1e6)
        return ms

    def graphs(self, fn, sets):
        """Per input set, the forward recorded for autograd: (O, [q, k, v] leaves, dO)."""
        out = []
        for q, k, v in sets:
            leaves = [x.detach().requires_grad_() for x in (q, k, v)]
            o = fn(*leaves)
            out.append((o, leaves, self.torch.randn_like(o)))
        return out

    def grad_step(self, o, leaves, d_o):
        """One backward pass: dQ, dK, dV of sum(dO * O), the graph kept for the next call."""
        self.torch.autograd.grad(o, leaves, d_o, retain_graph=True)

    def measure(self, impl, s, sets, a):
        t = self.torch
        lengths = varlen_lengths(s, a.seed) if s.get("varlen") else None
        work = flops(s, a.backward, lengths)
        rec = dict(shape=dict(s), implementation=f"torch:{impl}",
                   backend="flash-attn-3" if impl == "fa3" else "torch-sdpa",
                   kernel_requested=impl, kernel=impl, precision="native",
                   description=IMPL_DESCRIPTIONS[impl] + (", backward" if a.backward else ""),
                   status="ok", message="", flops=work)
        if lengths:
            rec.update(tokens_q=sum(x for x, _ in lengths), tokens_kv=sum(y for _, y in lengths))
        try:
            fn, backend_choice, note = self.callable_for(impl, s)
            if self.device == "cuda":
                t.cuda.reset_peak_memory_stats()
            if a.backward:
                with backend_choice:
                    ms = self.time(self.grad_step, self.graphs(fn, sets), a.warmup, a.repeat,
                                   a.queue)
            else:
                with t.no_grad(), backend_choice:
                    ms = self.time(fn, sets, a.warmup, a.repeat, a.queue)
        except NotImplementedError as e:
            rec.update(status="unsupported", message=str(e))
            return rec
        except RuntimeError as e:
            text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            unsupported = any(x in text.lower() for x in
                              ("no available kernel", "not supported", "no viable backend"))
            oom = "out of memory" in text.lower()
            rec.update(status="unsupported" if unsupported or oom else "failed", message=text)
            if self.device == "cuda":
                t.cuda.empty_cache()
            return rec
        if impl == "flashport":
            rec.update(implementation="python:flashport", backend=self.fp_plan.backend,
                       kernel_requested=self.fp_kernel or "", kernel=self.fp_plan.kernel)
        med = statistics.median(ms)
        q_bytes, kv_bytes, o_bytes = tensor_bytes(s, lengths)
        rec.update(
            message=note,
            repeats=len(ms),
            ms=dict(min=min(ms), median=med, max=max(ms)),
            tflops=work / (med * 1e-3) / 1e12,
            ceiling="", ceiling_tflops=None, pct_of_ceiling=None, workspace_bytes=None,
            input_bytes=q_bytes + kv_bytes, output_bytes=o_bytes,
            bytes_moved=q_bytes + kv_bytes + o_bytes, bandwidth_fraction=None,
            read_fraction=None,
            input_sets=len(sets),
            peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            max_abs_err=None, rel_l2_err=None, checked_on="", speedup_vs_previous=None)
        if self.device == "cuda":
            rec["peak_device_bytes"] = t.cuda.max_memory_allocated()
        return rec


def add_ceilings(records, ceilings, device_kind, cpu_threads):
    """Gives torch records the % of the ceiling and the fractions of the copy and read-only
    bandwidths that flashport-bench measured on the same device."""
    if not ceilings:
        return
    for field, key in (("bandwidth_fraction", "copy_gbps"), ("read_fraction", "read_gbps")):
        rate = (ceilings.get(key) or 0) * 1e9  # null: not measured
        for r in records:
            if r["status"] == "ok" and rate > 0 and r.get(field) is None:
                r[field] = r["bytes_moved"] / (r["ms"]["median"] * 1e-3) / rate
    for r in records:
        if r["status"] != "ok" or r.get("ceiling"):
            continue
        if device_kind == "cpu":
            name = f"f32_fma_per_core x {cpu_threads} threads"
            rate = (ceilings.get("f32_fma_tflops_per_core") or 0) * cpu_threads
        else:
            name = {"f32": "f32_fma", "f16": "f16_mma", "bf16": "bf16_mma"}[r["shape"]["dtype"]]
            rate = ceilings.get(name + "_tflops") or 0
        if rate > 0:
            r.update(ceiling=name, ceiling_tflops=rate, pct_of_ceiling=100 * r["tflops"] / rate)


def print_table(records):
    """Per shape, every implementation with its time and two ratios (> 1: faster than it):
    against PyTorch's flash backend, the FlashAttention-2 bar, and against the fastest torch."""
    by_shape = {}
    for r in records:
        by_shape.setdefault(shape_key(r["shape"]), []).append(r)
    print(f"{'implementation':<46} {'median ms':>10} {'TFLOP/s':>9} {'%bw':>6} {'%read':>6} "
          f"{'vs flash':>9} {'vs best torch':>14}")
    for recs in by_shape.values():
        print("\n" + shape_text(recs[0]["shape"]))
        ok = {r["implementation"]: r for r in recs if r["status"] == "ok"}
        torch_ok = [r for name, r in ok.items() if name.startswith("torch:")]
        best = min(torch_ok, key=lambda r: r["ms"]["median"]) if torch_ok else None
        flash = ok.get("torch:flash")
        for r in recs:
            if r["status"] != "ok":
                print(f"  {r['implementation']:<44} {r['status']}: {r['message']}")
                continue
            med = r["ms"]["median"]
            vs_flash = f"{flash['ms']['median'] / med:.2f}x" if flash else "-"
            vs_best = f"{best['ms']['median'] / med:.2f}x" if best else "-"
            bw, rd = (r.get(k) for k in ("bandwidth_fraction", "read_fraction"))
            bw = f"{100 * bw:.1f}" if bw is not None and bw == bw else "-"
            rd = f"{100 * rd:.1f}" if rd is not None and rd == rd else "-"
            print(f"  {r['implementation']:<44} {med:10.3f} {r['tflops']:9.3f} {bw:>6} {rd:>6} "
                  f"{vs_flash:>9} {vs_best:>14}")
        if best:
            print(f"  (fastest torch: {best['implementation']})")


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    shapes = shapes_from_args(a)
    if a.list_shapes:
        for s in shapes:
            print(shape_text(s))
        return 0
    if a.flashport_bench and not os.access(a.flashport_bench, os.X_OK):
        sys.exit(f"compare_torch.py: {a.flashport_bench} is not an executable")

    records, fp_doc, fp_rc = [], None, 0
    if a.flashport_bench:
        fp_doc, fp_rc = run_flashport(a)
    tch = Torch(a)
    device = tch.device_info()
    for n, s in enumerate(shapes, 1):
        sets = tch.inputs(s, tch.sets_for(s), a.seed)
        if fp_doc:
            records += [r for r in fp_doc["results"] if shape_key(r["shape"]) == shape_key(s)]
        for impl in a.impls:
            label = "python:flashport" if impl == "flashport" else f"torch:{impl}"
            print(f"[{n}/{len(shapes)}] {shape_text(s)} {label}", file=sys.stderr)
            records.append(tch.measure(impl, s, sets, a))
        del sets
        if a.device == "cuda":
            tch.torch.cuda.empty_cache()
        if a.json and n < len(shapes):
            # A run cut short keeps the shapes it finished.
            write_json(a, tch, fp_doc, device, records, complete=False)

    if fp_doc:
        add_ceilings(records, fp_doc.get("ceilings"), device["kind"],
                     fp_doc.get("settings", {}).get("cpu_threads_for_ceiling") or 1)
    print_table(records)
    if a.json:
        write_json(a, tch, fp_doc, device, records, complete=True)
    failed = fp_rc != 0 or any(r["status"] == "failed" for r in records)
    return 1 if failed else 0


def write_json(a, tch, fp_doc, device, records, complete):
    """The run's document: flashport-bench's schema, every record so far; complete says whether
    every shape of the run is in it."""
    doc = dict(schema=SCHEMA, tool="compare_torch.py",
               flashport_version=fp_doc["flashport_version"] if fp_doc else "",
               git_commit=fp_doc["git_commit"] if fp_doc else "",
               date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               preset=a.preset or "", backend=fp_doc["backend"] if fp_doc else "",
               device=device,
               settings=dict(warmup=a.warmup, repeat=a.repeat, queue=a.queue,
                             threads=a.threads, seed=a.seed,
                             **{"pass": "backward" if a.backward else "forward"},
                             torch_version=tch.torch.__version__, torch_device=a.device,
                             cache_bytes=tch.cache_bytes),
               ceilings=fp_doc.get("ceilings") if fp_doc else None,
               flashport=({k: v for k, v in fp_doc.items() if k != "results"}
                          if fp_doc else None),
               complete=complete, results=records)
    # Written beside and renamed over, so that a run killed mid-write leaves the last whole file.
    tmp = a.json + ".partial"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, a.json)


if __name__ == "__main__":
    sys.exit(main())
