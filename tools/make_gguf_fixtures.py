#!/usr/bin/env python3
"""Writes the GGUF and quantization test fixtures (small, deterministic, committed).

    pip install gguf numpy            # gguf-py, llama.cpp's own Python package (0.19 was used)
    python3 tools/make_gguf_fixtures.py [--smollm2 PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf]

Outputs
  tests/fixtures/quant/<TYPE>.blocks   1024 elements of TYPE as raw ggml blocks
  tests/fixtures/quant/<TYPE>.f32      gguf.quants.dequantize() of them: the bit-exact reference
  tests/fixtures/gguf/tiny_llama.gguf  a 2-layer llama (hidden 32, 4 heads, 2 kv heads), mixed dtypes
  tests/fixtures/gguf/tiny_qwen2.gguf  a 2-layer qwen2 with q/k/v biases, tied embeddings, GGUF v2
  tests/fixtures/gguf/all_types.gguf   one [2, 256] tensor per supported type (= the first 512
                                       elements of the quant fixtures), a 3-d tensor, alignment 64
  tests/fixtures/gguf/bad_*.gguf       broken variants; each must be rejected with BadInput naming
                                       the file and the offending key or tensor (see BROKEN below)
  tests/fixtures/gguf/smollm2_*.f32    with --smollm2 (or MEDTUNE_SMOLLM2_GGUF): gguf-py's
                                       dequantization of token_embd.weight row 0 (Q8_0) and
                                       blk.0.attn_q.weight row 0 (Q4_1) of the real file
  fuzz/corpus/gguf/                    seeds: the small valid fixtures and a few broken ones
"""
from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

ROOT = Path(__file__).resolve().parent.parent
QUANT_DIR = ROOT / "tests" / "fixtures" / "quant"
GGUF_DIR = ROOT / "tests" / "fixtures" / "gguf"
CORPUS_DIR = ROOT / "fuzz" / "corpus" / "gguf"

N_QUANT = 1024  # elements per quant fixture: 4 k-quant super-blocks, 32 legacy blocks
# Appended types come last: each type draws from one random stream in this order, so a new one
# leaves the fixtures before it unchanged.
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K", "Q5_0", "Q5_1", "Q5_K", "Q2_K",
         "Q3_K", "IQ4_NL", "IQ4_XS"]


# ------------------------------------------------------------------ quantized blocks

def random_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """Finite halves over many binades, both signs, with zeros and subnormals mixed in.
    (NaN/Inf are left out: F16C and numpy disagree on signalling-NaN payloads, which no weight has.)"""
    mag = np.exp2(rng.uniform(-26.0, 2.0, n)).astype(np.float16)  # < 2^-14 is subnormal, < 2^-24 is 0
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0).astype(np.float16)
    return (mag * sign).astype(np.float16)


def make_blocks(name: str, rng: np.random.Generator) -> bytes:
    qt = QT[name]
    n = N_QUANT
    if name == "F32":
        vals = rng.standard_normal(n).astype(np.float32)
        vals[:8] = [0.0, -0.0, 1e-45, -3.0e30, 1.0, -1.0, 2.0**-126, 65504.0]
        return vals.tobytes()
    if name == "F16":
        return random_f16(rng, n).tobytes()
    if name == "BF16":
        # half via gguf's own f32 -> bf16 rounding, half raw bit patterns (finite only).
        a = quantize(rng.standard_normal(n // 2).astype(np.float32), qt).tobytes()
        raw = rng.integers(0, 1 << 16, n // 2, dtype=np.uint32).astype(np.uint16)
        raw = np.where((raw & 0x7F80) == 0x7F80, raw & 0xBFFF, raw).astype(np.uint16)  # no Inf/NaN
        return a + raw.tobytes()

    block, size = gguf.GGML_QUANT_SIZES[qt]
    nb = n // block
    out = np.frombuffer(rng.bytes(nb * size), dtype=np.uint8).reshape(nb, size).copy()
    # Valid f16 scales at their places in the block, random bits everywhere else.
    scale_offsets = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q4_K": [0, 2], "Q6_K": [208],
                     "Q5_0": [0], "Q5_1": [0, 2], "Q5_K": [0, 2], "Q2_K": [80, 82], "Q3_K": [108],
                     "IQ4_NL": [0], "IQ4_XS": [0]}[name]
    for off in scale_offsets:
        out[:, off:off + 2] = random_f16(rng, nb).view(np.uint8).reshape(nb, 2)
    if name in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        # The first half of the blocks: gguf-py's quantizer on real-looking weights.
        half = nb // 2
        w = (rng.standard_normal(half * block) * 0.05).astype(np.float32).reshape(1, -1)
        out[:half] = quantize(w, qt).reshape(half, size)
    return out.tobytes()


def write_quant_fixtures() -> dict[str, bytes]:
    QUANT_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240601)
    blobs = {}
    for name in TYPES:
        raw = make_blocks(name, rng)
        qt = QT[name]
        ref = dequantize(np.frombuffer(raw, dtype=np.uint8), qt) if name != "F32" else \
            np.frombuffer(raw, dtype=np.float32)
        ref = np.ascontiguousarray(ref, dtype=np.float32).reshape(-1)
        assert ref.size == N_QUANT, (name, ref.size)
        (QUANT_DIR / f"{name}.blocks").write_bytes(raw)
        (QUANT_DIR / f"{name}.f32").write_bytes(ref.tobytes())
        blobs[name] = raw
    return blobs


# ------------------------------------------------------------------ tiny models

def tensor_bytes(rng: np.random.Generator, qt: QT, shape: tuple[int, ...]) -> np.ndarray:
    """Random weights of `shape` (PyTorch order) stored as qt, ready for GGUFWriter.add_tensor."""
    w = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    if qt == QT.F32:
        return w
    if qt == QT.F16:
        return w.astype(np.float16)
    return quantize(w, qt)  # uint8 bytes, last dim = bytes per row


def add_tokenizer(w: gguf.GGUFWriter, vocab: int) -> None:
    tokens = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(vocab - 3)]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (vocab - 3))
    w.add_token_merges(["t 1", "t1 0"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_string("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}")


def write_model(path: Path, arch: str, rng: np.random.Generator, *, tied: bool, bias: bool,
                extra_kv: bool = False, rope_freqs: bool = False,
                arch_override: str | None = None, skip_keys: tuple[str, ...] = (),
                tensors: bool = True, overrides: dict | None = None) -> None:
    C, F, NH, NKV, L, V = 32, 32, 4, 2, 2, 32
    HD = C // NH
    w = gguf.GGUFWriter(str(path), arch_override or arch)
    w.add_name(f"tiny {arch}")
    kv = {
        "context_length": ("u32", 128), "embedding_length": ("u32", C), "block_count": ("u32", L),
        "feed_forward_length": ("u32", F), "attention.head_count": ("u32", NH),
        "attention.head_count_kv": ("u32", NKV),
        "attention.layer_norm_rms_epsilon": ("f32", 1e-5 if arch == "llama" else 1e-6),
        "rope.freq_base": ("f32", 500000.0 if arch == "llama" else 1000000.0),
        "rope.dimension_count": ("u32", HD),
    }
    kv.update(overrides or {})
    for k, (t, v) in kv.items():
        if k in skip_keys:
            continue
        key = f"{arch}.{k}"
        {"u32": w.add_uint32, "f32": w.add_float32, "str": w.add_string}[t](key, v)
    add_tokenizer(w, V)
    if extra_kv:  # one key of every GGUF value type, and arrays of each
        w.add_uint8("test.u8", 200)
        w.add_int8("test.i8", -100)
        w.add_uint16("test.u16", 60000)
        w.add_int16("test.i16", -30000)
        w.add_uint32("test.u32", 4000000000)
        w.add_int32("test.i32", -2000000000)
        w.add_float32("test.f32", 0.25)
        w.add_bool("test.bool", True)
        w.add_string("test.string", "h\u00e9llo")
        w.add_uint64("test.u64", 1 << 40)
        w.add_int64("test.i64", -(1 << 40))
        w.add_float64("test.f64", -1.5e-300)
        w.add_key_value("test.arr_u8", [1, 2, 255], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT8)
        w.add_key_value("test.arr_i16", [-1, 7], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT16)
        w.add_key_value("test.arr_u64", [0, 1 << 50], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT64)
        w.add_key_value("test.arr_f64", [0.5, -2.0], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.FLOAT64)
        w.add_key_value("test.arr_f32", [0.5, 3.0], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.FLOAT32)
        w.add_key_value("test.arr_bool", [True, False], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL)

    def add(name: str, qt: QT, shape: tuple[int, ...]) -> None:
        data = tensor_bytes(rng, qt, shape)
        w.add_tensor(name, data, raw_dtype=None if qt in (QT.F32, QT.F16) else qt)

    if not tensors:  # metadata only: enough for the config errors
        L = 0
    else:
        add("token_embd.weight", QT.Q8_0, (V, C))
        add("output_norm.weight", QT.F32, (C,))
    if not tied and tensors:
        add("output.weight", QT.Q4_0, (V, C))
    if rope_freqs and tensors:
        # llama3's per-pair divisors lie in [1, factor]: |N(0, 0.1)| + 1, drawn like every other
        # tensor so the random stream (and every later tensor) is unchanged.
        w.add_tensor("rope_freqs.weight", np.abs(tensor_bytes(rng, QT.F32, (HD // 2,))) + np.float32(1.0))
    for i in range(L):
        add(f"blk.{i}.attn_norm.weight", QT.F32, (C,))
        add(f"blk.{i}.attn_q.weight", QT.Q4_1, (NH * HD, C))
        add(f"blk.{i}.attn_k.weight", QT.F16 if i == 0 else QT.Q8_0, (NKV * HD, C))
        add(f"blk.{i}.attn_v.weight", QT.BF16 if i == 0 else QT.Q8_0, (NKV * HD, C))
        if bias:
            add(f"blk.{i}.attn_q.bias", QT.F32, (NH * HD,))
            add(f"blk.{i}.attn_k.bias", QT.F32, (NKV * HD,))
            add(f"blk.{i}.attn_v.bias", QT.F32, (NKV * HD,))
        add(f"blk.{i}.attn_output.weight", QT.Q8_0, (C, NH * HD))
        add(f"blk.{i}.ffn_norm.weight", QT.F32, (C,))
        add(f"blk.{i}.ffn_gate.weight", QT.Q4_0, (F, C))
        add(f"blk.{i}.ffn_up.weight", QT.Q4_0, (F, C))
        add(f"blk.{i}.ffn_down.weight", QT.Q4_1, (C, F))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_all_types(path: Path, blobs: dict[str, bytes]) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_custom_alignment(64)
    for name in TYPES:
        qt = QT[name]
        block, size = gguf.GGML_QUANT_SIZES[qt]
        row = 256 // block * size
        data = np.frombuffer(blobs[name][:2 * row], dtype=np.uint8).reshape(2, row)
        w.add_tensor(f"t.{name}", data, raw_dtype=qt)
    w.add_tensor("t.3d", np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_broken_base(path: Path) -> None:
    """A ~1.5 KB valid llama-ish GGUF that the broken variants are patched from."""
    rng = np.random.default_rng(5)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("broken base")
    w.add_uint32("llama.context_length", 128)
    w.add_uint32("llama.block_count", 2)
    w.add_token_list([f"t{i}" for i in range(8)])
    for name, qt, shape in [("token_embd.weight", QT.Q8_0, (8, 32)), ("output_norm.weight", QT.F32, (32,)),
                            ("output.weight", QT.Q4_0, (8, 32)),
                            ("blk.0.attn_output.weight", QT.Q8_0, (4, 32)),
                            ("blk.0.ffn_up.weight", QT.Q4_0, (4, 32)),
                            ("blk.1.attn_q.weight", QT.Q4_1, (4, 32)),
                            ("blk.1.ffn_down.weight", QT.Q4_1, (4, 32))]:
        w.add_tensor(name, tensor_bytes(rng, qt, shape), raw_dtype=None if qt == QT.F32 else qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------ a map of a GGUF file's bytes

class Layout:
    """Byte offsets of the fields of a (valid, little-endian) GGUF file, for patching."""

    def __init__(self, b: bytes):
        self.b = b
        pos = 8
        self.n_tensors_at = pos
        n_t, n_kv = struct.unpack_from("<QQ", b, pos)
        pos += 16
        self.kv: dict[str, dict[str, int]] = {}
        for _ in range(n_kv):
            key_at = pos
            key, pos = self._str(pos)
            vtype_at = pos
            (vt,) = struct.unpack_from("<I", b, pos)
            pos += 4
            value_at = pos
            pos = self._skip_value(vt, pos)
            self.kv[key] = {"key": key_at, "type": vtype_at, "value": value_at, "end": pos}
        self.tensors: dict[str, dict[str, int]] = {}
        for _ in range(n_t):
            name_at = pos
            name, pos = self._str(pos)
            (nd,) = struct.unpack_from("<I", b, pos)
            ent = {"name": name_at, "n_dims": pos, "ne": pos + 4, "type": pos + 4 + 8 * nd,
                   "offset": pos + 8 + 8 * nd}
            pos += 4 + 8 * nd + 4 + 8
            self.tensors[name] = ent
        self.infos_end = pos

    def _str(self, pos: int) -> tuple[str, int]:
        (n,) = struct.unpack_from("<Q", self.b, pos)
        return self.b[pos + 8:pos + 8 + n].decode("utf-8"), pos + 8 + n

    def _skip_value(self, vt: int, pos: int) -> int:
        fixed = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        if vt in fixed:
            return pos + fixed[vt]
        if vt == 8:
            return self._str(pos)[1]
        assert vt == 9
        et, n = struct.unpack_from("<IQ", self.b, pos)
        pos += 12
        for _ in range(n):
            pos = self._skip_value(et, pos)
        return pos


def patch(b: bytes, at: int, fmt: str, *vals) -> bytes:
    m = bytearray(b)
    struct.pack_into(fmt, m, at, *vals)
    return bytes(m)


def gguf_string(s: str) -> bytes:
    e = s.encode()
    return struct.pack("<Q", len(e)) + e


def raw_gguf(kvs: list[bytes], tensors: list[bytes], data: bytes, n_tensors: int | None = None) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if n_tensors is None else n_tensors, len(kvs))
    body = head + b"".join(kvs) + b"".join(tensors)
    body += b"\0" * (-len(body) % 32)
    return body + data


# Broken variants, written as bad_<name>.gguf; test_gguf.cpp lists what each message must name.
def broken_variants(llama: bytes) -> dict[str, bytes]:
    lay = Layout(llama)
    out: dict[str, bytes] = {}
    out["magic"] = b"GGUX" + llama[4:]
    out["version"] = patch(llama, 4, "<I", 1)
    out["truncated_header"] = llama[:14]
    bc = lay.kv["llama.block_count"]["value"]
    out["truncated_metadata"] = llama[:bc + 2]  # inside llama.block_count's u32
    out["truncated_tensor_infos"] = llama[:lay.tensors["blk.1.attn_q.weight"]["ne"] + 3]
    out["truncated_data"] = llama[:len(llama) - 40]  # cuts into the last tensor's data
    out["huge_array"] = patch(llama, lay.kv["tokenizer.ggml.tokens"]["value"] + 4, "<Q", 1 << 62)
    out["huge_string"] = patch(llama, lay.kv["general.name"]["value"], "<Q", (1 << 63) + 5)
    out["huge_tensor_count"] = patch(llama, 8, "<Q", 1 << 40)
    out["offset_outside"] = patch(llama, lay.tensors["blk.1.ffn_down.weight"]["offset"], "<Q", 1 << 30)
    (off,) = struct.unpack_from("<Q", llama, lay.tensors["blk.0.ffn_up.weight"]["offset"])
    out["misaligned_offset"] = patch(llama, lay.tensors["blk.0.ffn_up.weight"]["offset"], "<Q", off + 4)
    out["unknown_type"] = patch(llama, lay.tensors["blk.0.attn_output.weight"]["type"], "<I", 99)
    out["unsupported_type"] = patch(llama, lay.tensors["blk.0.attn_output.weight"]["type"], "<I", 16)
    out["ndims"] = patch(llama, lay.tensors["output_norm.weight"]["n_dims"], "<I", 5)
    out["block"] = patch(llama, lay.tensors["token_embd.weight"]["ne"], "<Q", 48)
    out["huge_dim"] = patch(llama, lay.tensors["output.weight"]["ne"] + 8, "<Q", 1 << 62)
    # Found by fuzz_gguf: the element count fits in int64 but the byte count does not.
    out["huge_bytes"] = patch(llama, lay.tensors["output_norm.weight"]["ne"], "<Q", 1 << 62)
    (emb_off,) = struct.unpack_from("<Q", llama, lay.tensors["token_embd.weight"]["offset"])
    out["overlap"] = patch(llama, lay.tensors["output_norm.weight"]["offset"], "<Q", emb_off + 64)
    out["value_type"] = patch(llama, lay.kv["llama.context_length"]["type"], "<I", 13)
    out["alignment"] = raw_gguf(
        [gguf_string("general.alignment") + struct.pack("<II", 4, 48)], [], b"")
    out["nested_array"] = raw_gguf(
        [gguf_string("test.nested") + struct.pack("<IIQ", 9, 9, 1) + struct.pack("<IQ", 4, 1) +
         struct.pack("<I", 7)], [], b"")
    out["duplicate_key"] = raw_gguf(
        [gguf_string("general.name") + struct.pack("<I", 8) + gguf_string("a"),
         gguf_string("general.name") + struct.pack("<I", 8) + gguf_string("b")], [], b"")
    out["wrong_type"] = raw_gguf(  # block_count as a string: checkpoint_from_gguf must say so
        [gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama"),
         gguf_string("llama.block_count") + struct.pack("<I", 8) + gguf_string("two")], [], b"")
    return out


def write_smollm2(path: Path) -> None:
    r = gguf.GGUFReader(str(path))
    by_name = {t.name: t for t in r.tensors}
    for tname, fname in (("token_embd.weight", "smollm2_token_embd_row0.f32"),
                         ("blk.0.attn_q.weight", "smollm2_blk0_attn_q_row0.f32")):
        t = by_name[tname]
        row = np.asarray(t.data)[0:1]  # (1, bytes per row) of raw blocks
        vals = dequantize(np.ascontiguousarray(row), t.tensor_type).astype(np.float32).reshape(-1)
        assert vals.size == 576, vals.size
        (GGUF_DIR / fname).write_bytes(vals.tobytes())
        print(f"wrote {fname} ({t.tensor_type.name})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smollm2", default=os.environ.get("MEDTUNE_SMOLLM2_GGUF"),
                    help="the real SmolLM2-135M-Instruct GGUF, to write its row fixtures")
    args = ap.parse_args()

    blobs = write_quant_fixtures()
    GGUF_DIR.mkdir(parents=True, exist_ok=True)
    write_model(GGUF_DIR / "tiny_llama.gguf", "llama", np.random.default_rng(1), tied=False,
                bias=False, extra_kv=True, rope_freqs=True)
    qwen = GGUF_DIR / "tiny_qwen2.gguf"
    write_model(qwen, "qwen2", np.random.default_rng(2), tied=True, bias=True)
    qwen.write_bytes(patch(qwen.read_bytes(), 4, "<I", 2))  # v2 has the v3 layout (LE only)
    write_all_types(GGUF_DIR / "all_types.gguf", blobs)
    write_model(GGUF_DIR / "unsupported_arch.gguf", "llama", np.random.default_rng(3), tied=False,
                bias=False, arch_override="gpt2", tensors=False)
    write_model(GGUF_DIR / "missing_key.gguf", "llama", np.random.default_rng(4), tied=False,
                bias=False, skip_keys=("block_count",), tensors=False)

    # Metadata-only llama variants for the config reader: rope choices it takes or refuses.
    for name, ov in {
        "partial_rotary": {"rope.dimension_count": ("u32", 4)},
        "rope_yarn": {"rope.scaling.type": ("str", "yarn"), "rope.scaling.factor": ("f32", 4.0)},
        "rope_llama3": {"rope.scaling.type": ("str", "llama3"), "rope.scaling.factor": ("f32", 8.0),
                        "rope.scaling.original_context_length": ("u32", 8192),
                        "rope.scaling.low_freq_factor": ("f32", 1.0),
                        "rope.scaling.high_freq_factor": ("f32", 4.0)},
    }.items():
        write_model(GGUF_DIR / f"{name}.gguf", "llama", np.random.default_rng(6), tied=False,
                    bias=False, tensors=False, overrides=ov)

    base = GGUF_DIR / "_broken_base.gguf"
    write_broken_base(base)
    small = base.read_bytes()
    base.unlink()
    for old in GGUF_DIR.glob("bad_*.gguf"):
        old.unlink()
    for name, b in broken_variants(small).items():
        (GGUF_DIR / f"bad_{name}.gguf").write_bytes(b)

    if args.smollm2:
        write_smollm2(Path(args.smollm2))

    CORPUS_DIR.mkdir(parents=True, exist_ok=True)
    for f in ["tiny_llama.gguf", "tiny_qwen2.gguf", "all_types.gguf", "bad_nested_array.gguf",
              "bad_duplicate_key.gguf", "bad_alignment.gguf", "bad_overlap.gguf",
              "bad_huge_array.gguf", "bad_huge_bytes.gguf"]:
        shutil.copyfile(GGUF_DIR / f, CORPUS_DIR / f"seed_{Path(f).stem}")
    for f in sorted(GGUF_DIR.glob("*.gguf")):
        print(f"{f.relative_to(ROOT)}: {f.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
