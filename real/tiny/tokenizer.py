"""A character tokenizer that vLLM and `transformers` read identically.

One token per character: the vocabulary is every printable ASCII character plus newline
(so all of `real.tiny.task`'s text, and any plain ASCII prompt, is covered), and four specials:
`<pad>`=0, `<s>`=1, `</s>`=2 (end of sequence) and `<unk>` last.

Why it is built the way it is (measured, docs/vllm-cpu-notes.md): transformers 5 ignores
`tokenizer_class` for `qwen2` models and rebuilds a `Qwen2Tokenizer` from the saved vocabulary
with Qwen's byte-level pre-tokenizer, which is also what vLLM does. A plain character
WordLevel vocabulary then silently loses spaces and the two loading paths disagree. So the
tokenizer *is* a Qwen-style byte-level BPE, with no merges: its vocabulary keys are GPT-2 byte
symbols (space -> 'Ġ', newline -> 'Ċ'), its normalizer, pre-tokenizer and decoder are
Qwen2Tokenizer's. Every loading path then gives the same ids and decodes back exactly.

No BOS is added to encoded text (neither path adds one): a sequence is prompt + response
+ `</s>`.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIALS = ("<pad>", "<s>", "</s>")
UNK = "<unk>"
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
# Printable ASCII (space to '~') and newline: one token each.
CHARS = "".join(chr(c) for c in range(32, 127)) + "\n"
# Qwen2Tokenizer's pre-tokenization regex (transformers, tokenization_qwen2.py).
PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-character map (the one `tokenizers`' ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) \
        + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def vocabulary() -> dict[str, int]:
    """Token -> id: the specials, then each character of CHARS as its byte symbol, `<unk>` last."""
    b2u = bytes_to_unicode()
    tokens = list(SPECIALS) + [b2u[ord(c)] for c in CHARS] + [UNK]
    return {t: i for i, t in enumerate(tokens)}


def build_tokenizer(out_dir: str | Path | None = None):
    """Build the tokenizer as a `PreTrainedTokenizerFast`; save it to `out_dir` if given.

    Returns the tokenizer. `AutoTokenizer.from_pretrained(out_dir)` (whatever class it
    picks for the model next to it) and vLLM give the same ids for any ASCII text.
    """
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
    )
    from transformers import PreTrainedTokenizerFast

    vocab = vocabulary()
    tok = Tokenizer(
        models.BPE(vocab=vocab, merges=[], unk_token=UNK, fuse_unk=False, byte_fallback=False)
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t in (*SPECIALS, UNK)])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token=UNK,
        model_max_length=2048,
    )
    if out_dir is not None:
        save_tokenizer(hf, out_dir)
    return hf


def save_tokenizer(tok, out_dir: str | Path) -> None:
    """`save_pretrained`, naming the class `PreTrainedTokenizerFast` (transformers 5 writes its
    own `TokenizersBackend`, which transformers 4 cannot load; both read tokenizer.json alike)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def vocab_size() -> int:
    return len(vocabulary())
