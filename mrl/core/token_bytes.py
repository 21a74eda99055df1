"""A tokenizer's tokens as UTF-8 bytes: the rules by which each piece gives the bytes it contributes to a text
(byte-level BPE through GPT-2's byte alphabet, SentencePiece's Metaspace with byte fallback, WordPiece's `##`, plain
pieces), read from the tokenizer's own decoder spec, and ThlError, which THL and the marginal raise on what they cannot
read. Both build on it (mrl.core.thl, mrl.core.marginal); it imports nothing of mrl.
"""
from __future__ import annotations

import json
import numbers
import re
import weakref
from dataclasses import dataclass
from functools import lru_cache

from tokenizers import Tokenizer


BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


WORDPIECE_GLUED = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"}


class ThlError(ValueError):
    """Input THL cannot align: ids that are not integers of the source vocabulary, a text or ids whose bytes
    are not valid UTF-8, or (with strict=True) a text one side cannot reproduce byte for byte."""


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: printable unicode char -> byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


@dataclass(frozen=True)
class PieceRules:
    """How a tokenizer's token strings map to text bytes, read off its `tokenizers` decoder."""

    byte_level: bool
    byte_fallback: bool
    wordpiece_prefix: str | None
    metaspace: str | None
    wordpiece_cleanup: bool = False


def _decoder_types(decoder: dict | None) -> list[dict]:
    if not decoder:
        return []
    if decoder.get("type") == "Sequence":
        return [d for sub in decoder["decoders"] for d in _decoder_types(sub)]
    return [decoder]


@lru_cache(maxsize=64)
def _rules_for(spec_json: str) -> PieceRules:
    spec = json.loads(spec_json)
    decoders = _decoder_types(spec.get("decoder"))
    types = {d["type"] for d in decoders}
    wordpiece = next((d.get("prefix", "##") for d in decoders if d["type"] == "WordPiece"), None)
    metaspace = next((d.get("replacement", "▁") for d in decoders if d["type"] == "Metaspace"), None)
    if metaspace is None and any(d["type"] == "Replace" and d.get("content") == " " for d in decoders):
        metaspace = next(d["pattern"]["String"] for d in decoders if d["type"] == "Replace")
    cleanup = any(d["type"] == "WordPiece" and d.get("cleanup", True) for d in decoders)
    return PieceRules("ByteLevel" in types, "ByteFallback" in types, wordpiece, metaspace, cleanup)


def piece_rules(tokenizer) -> PieceRules:
    """The byte rules of a fast (tokenizers-backed) tokenizer, read from its decoder alone."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ThlError(f"{type(tokenizer).__name__} has no tokenizers backend; THL needs a fast tokenizer")
    decoder = backend.decoder
    return _rules_for(json.dumps({"decoder": json.loads(decoder.__getstate__()) if decoder else None}))


class _TokenizerView:
    """What THL needs of one tokenizer, computed once: vocabulary size, special ids, byte rules and
    a cache id -> (bytes, whether a WordPiece word start takes a space when not first)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.special = frozenset(tokenizer.all_special_ids)
        self.rules = piece_rules(tokenizer)
        self.cache: dict[int, tuple[bytes, bool]] = {}
        # encode exactly the text: a private copy without padding or truncation, whatever the file sets and whatever
        # later calls do to the shared backend (transformers turns padding on there at a padded call and leaves it on)
        backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        backend.no_padding()
        backend.no_truncation()
        self.backend = backend

    def piece(self, token_id: int) -> tuple[bytes, bool]:
        cached = self.cache.get(token_id)
        if cached is not None:
            return cached
        rules, token = self.rules, self.tokenizer.convert_ids_to_tokens(token_id)
        spaced = False
        if token_id in self.special or token is None:
            piece = b""
        elif rules.byte_level and all(c in _byte_decoder() for c in token):
            piece = bytes(_byte_decoder()[c] for c in token)
        elif rules.byte_fallback and BYTE_FALLBACK.match(token):
            piece = bytes([int(BYTE_FALLBACK.match(token).group(1), 16)])
        elif rules.wordpiece_prefix is not None:
            if token.startswith(rules.wordpiece_prefix):
                piece = token[len(rules.wordpiece_prefix):].encode()
            else:
                piece = token.encode()
                spaced = not (rules.wordpiece_cleanup and token in WORDPIECE_GLUED)
        elif rules.metaspace is not None:
            piece = token.replace(rules.metaspace, " ").encode()
        else:
            piece = token.encode()
        self.cache[token_id] = (piece, spaced)
        return piece, spaced


_VIEWS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def token_view(tokenizer) -> _TokenizerView:
    view = _VIEWS.get(tokenizer)
    if view is None:
        view = _VIEWS[tokenizer] = _TokenizerView(tokenizer)
    return view


def shown_value(value) -> str:
    """A value as an error message shows it, bounded: a huge int by its size, a long str cut, an object of an
    unknown type by its type name (its repr is never called)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"<an int of {value.bit_length()} bits>"
    if isinstance(value, str):
        return repr(str.__str__(value)[:20]) + ("..." if len(value) > 20 else "")
    if value is None or isinstance(value, (bool, int, float)) or (isinstance(value, numbers.Number)
                                                                  and type(value).__module__ == "numpy"):
        return repr(value)
    return f"<{type(value).__name__}>"


def utf8_bytes(text: str) -> bytes:
    if not isinstance(text, str):
        raise ThlError(f"text must be a str, got {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ThlError(f"text is not valid UTF-8: {err}") from None
