"""THL, the Tokenizer Heterogeneity Layer (SPEC section 5): text is the unit of exchange.

1. Retokenize: decode the source ids (`skip_special_tokens=True, clean_up_tokenization_spaces=False`)
   and encode the text with the receiver (`add_special_tokens=False`).
2. Align by bytes: every token is given the UTF-8 bytes it contributes to the text (byte-level BPE
   through GPT-2's byte alphabet, SentencePiece/Metaspace with byte fallback, WordPiece with `##`,
   plain pieces); both sides are cut wherever both have a token boundary at the same byte. Each
   cut-to-cut segment is a *group*: a source token range and a receiver token range.
3. Project per-token values: `sum` (each group's total is placed on its last receiver token, so
   every group total and the sequence total are preserved), `broadcast` (the group mean of the
   source values, a scalar to every token), `any` / `all` for masks.
4. Residual cost: `residual` returns a ThlReport (round-trip failures, non-canonical samples,
   coarseness, truncation loss, the length-normalisation gap of a mean-based sequence ratio).

When a side's pieces do not reproduce the text byte for byte (WordPiece lower-casing, `<unk>`,
normalisers), no byte-exact alignment exists: `align` then returns one coarse group holding
everything, flagged `exact=False` (totals are still preserved), or raises ThlError with
`strict=True`. Nothing is aligned silently wrong. This module imports nothing of mrl.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np

BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
# tokens the WordPiece decoder's cleanup glues to the previous word (tokenizers' `cleanup` rules)
WORDPIECE_GLUED = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"}


class ThlError(ValueError):
    """Input THL cannot align: ids outside the source vocabulary, text that is not valid UTF-8,
    or (with strict=True) a text one side cannot reproduce byte for byte."""


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


def token_pieces(tokenizer, ids: list[int]) -> list[bytes]:
    """The UTF-8 bytes each token contributes to the decoded text; special tokens contribute none.

    Raises ThlError for ids outside the vocabulary.
    """
    vocab_size = len(tokenizer)
    bad = [i for i in ids if not isinstance(i, (int, np.integer)) or i < 0 or i >= vocab_size]
    if bad:
        raise ThlError(f"token ids {bad[:5]} are outside the vocabulary of size {vocab_size}")
    rules = piece_rules(tokenizer)
    special = set(tokenizer.all_special_ids)
    tokens = tokenizer.convert_ids_to_tokens(list(ids))
    pieces, first = [], True
    byte_decoder = _byte_decoder()
    for i, token in zip(ids, tokens):
        if i in special or token is None:
            pieces.append(b"")
            continue
        if rules.byte_level and all(c in byte_decoder for c in token):
            piece = bytes(byte_decoder[c] for c in token)
        elif rules.byte_fallback and BYTE_FALLBACK.match(token):
            piece = bytes([int(BYTE_FALLBACK.match(token).group(1), 16)])
        elif rules.wordpiece_prefix is not None:
            if token.startswith(rules.wordpiece_prefix):
                piece = token[len(rules.wordpiece_prefix):].encode()
            elif first or (rules.wordpiece_cleanup and token in WORDPIECE_GLUED):
                piece = token.encode()
            else:
                piece = (" " + token).encode()
        elif rules.metaspace is not None:
            piece = token.replace(rules.metaspace, " ").encode()
        else:
            piece = token.encode()
        first = first and not piece
        pieces.append(piece)
    return pieces


def _fit_pieces(pieces: list[bytes], text: bytes) -> list[bytes] | None:
    """Pieces whose concatenation is exactly `text`, dropping a decoder-stripped leading space; else None."""
    joined = b"".join(pieces)
    if joined == text:
        return pieces
    if joined[:1] == b" " and joined[1:] == text:
        first = next(k for k, p in enumerate(pieces) if p)
        return pieces[:first] + [pieces[first][1:]] + pieces[first + 1:]
    return None


@dataclass(frozen=True)
class Group:
    """One aligned segment: source tokens [src_start, src_end), receiver tokens [dst_start, dst_end),
    text bytes [byte_start, byte_end)."""

    src_start: int
    src_end: int
    dst_start: int
    dst_end: int
    byte_start: int
    byte_end: int


@dataclass
class Alignment:
    """The byte alignment of one text between a source and a receiver tokenization."""

    text: str
    src_ids: list[int]
    dst_ids: list[int]
    groups: list[Group]
    exact: bool
    """False when one side's pieces could not reproduce the text: one coarse group holds everything"""
    src_group: np.ndarray = field(repr=False)
    """(n_src,) group index of each source token"""
    dst_group: np.ndarray = field(repr=False)
    """(n_dst,) group index of each receiver token"""

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    def project(self, src_values, how: str = "sum") -> np.ndarray:
        """Map per-source-token values (n_src,) (or a scalar for `broadcast`) to receiver tokens (n_dst,).

        sum: group total on the group's last receiver token, 0 elsewhere (float64; group and
        sequence totals preserved); broadcast: every receiver token gets its group's mean source
        value (a scalar goes to every token); any / all: boolean masks by group.
        """
        n_dst = len(self.dst_ids)
        if how == "broadcast" and np.ndim(src_values) == 0:
            return np.full(n_dst, float(src_values))
        values = np.asarray(src_values)
        if values.shape != (len(self.src_ids),):
            raise ValueError(f"src_values must have shape ({len(self.src_ids)},), got {values.shape}")
        if how == "sum":
            totals = np.zeros(self.n_groups)
            np.add.at(totals, self.src_group, values.astype(np.float64))
            out = np.zeros(n_dst)
            placed = [k for k, g in enumerate(self.groups) if g.dst_end > g.dst_start]
            out[[self.groups[k].dst_end - 1 for k in placed]] = totals[placed]
            return out
        if how == "broadcast":
            totals = np.bincount(self.src_group, weights=values.astype(np.float64), minlength=self.n_groups)
            counts = np.bincount(self.src_group, minlength=self.n_groups)
            return (totals / np.maximum(counts, 1))[self.dst_group]
        if how in ("any", "all"):
            flags = values.astype(bool)
            per_group = np.array([(flags[g.src_start:g.src_end].any() if how == "any"
                                   else flags[g.src_start:g.src_end].all()) for g in self.groups], dtype=bool)
            return per_group[self.dst_group] if n_dst else np.zeros(0, dtype=bool)
        raise ValueError(f"how={how!r} is not allowed; expected one of ['sum', 'broadcast', 'any', 'all']")


def _boundary_keys(pieces: list[bytes], radix: int) -> np.ndarray:
    """(n + 1,) boundary keys: byte offset * radix + zero-byte tokens since the last byte-carrying one.

    Two tokenizations share a boundary when they share a key, so zero-byte tokens (a bare Metaspace
    '▁', a sampled EOS) align with their counterparts instead of merging with the next token.
    """
    keys, offset, run = [0], 0, 0
    for p in pieces:
        offset, run = (offset + len(p), 0) if p else (offset, run + 1)
        keys.append(offset * radix + run)
    return np.asarray(keys, dtype=np.int64)


def _group_tokens(keys: np.ndarray, cuts: np.ndarray, n_groups: int) -> np.ndarray:
    """Group index of each token: the cut segment containing its start key (trailing zero-byte
    tokens join the last group)."""
    return np.clip(np.searchsorted(cuts, keys[:-1], side="right") - 1, 0, max(n_groups - 1, 0))


def _utf8(text: str) -> bytes:
    if not isinstance(text, str):
        raise ThlError(f"text must be a str, got {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ThlError(f"text is not valid UTF-8: {err}") from None


def decode_text(tokenizer, ids: list[int]) -> str:
    """The text of sampled ids, as THL sees it."""
    return tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


def align(text: str | None, src_tokenizer, dst_tokenizer, src_ids: list[int] | None = None, *,
          strict: bool = False) -> Alignment:
    """Align a text's source tokenization with the receiver's by UTF-8 byte spans.

    text: the completion text (None: decoded from src_ids). src_ids: the sampled source ids (None:
    the source's canonical encoding of text). The receiver encodes the text without special tokens.
    Raises ThlError for ids outside the source vocabulary or text that is not valid UTF-8, and, with
    strict=True, when a side cannot reproduce the text byte for byte (else one coarse group).
    """
    if text is not None:
        _utf8(text)
    if src_ids is None:
        if text is None:
            raise ThlError("align needs a text or source ids")
        src_ids = src_tokenizer.encode(text, add_special_tokens=False)
    src_ids = [int(i) for i in src_ids]
    src_pieces = token_pieces(src_tokenizer, src_ids)
    text = decode_text(src_tokenizer, src_ids) if text is None else text
    text_bytes = _utf8(text)
    dst_ids = dst_tokenizer.encode(text, add_special_tokens=False)
    dst_pieces = token_pieces(dst_tokenizer, dst_ids)
    src_fit, dst_fit = _fit_pieces(src_pieces, text_bytes), _fit_pieces(dst_pieces, text_bytes)
    n_src, n_dst = len(src_ids), len(dst_ids)
    if src_fit is None or dst_fit is None:
        if strict:
            side = "source" if src_fit is None else "receiver"
            raise ThlError(f"the {side} tokenization does not reproduce the text byte for byte: {text[:60]!r}")
        groups = [Group(0, n_src, 0, n_dst, 0, len(text_bytes))] if (n_src or n_dst) else []
        return Alignment(text, src_ids, dst_ids, groups, False, np.zeros(n_src, dtype=np.int64),
                         np.zeros(n_dst, dtype=np.int64))
    radix = n_src + n_dst + 1
    src_keys, dst_keys = _boundary_keys(src_fit, radix), _boundary_keys(dst_fit, radix)
    cuts = np.intersect1d(src_keys, dst_keys)  # sorted; always holds key 0
    n_groups = max(len(cuts) - 1, 1)
    src_group, dst_group = _group_tokens(src_keys, cuts, n_groups), _group_tokens(dst_keys, cuts, n_groups)
    edges = np.append(cuts, max(src_keys[-1], dst_keys[-1])) // radix  # byte offset of each cut
    groups = []
    for g in range(n_groups):
        s = np.flatnonzero(src_group == g)
        d = np.flatnonzero(dst_group == g)
        groups.append(Group(int(s[0]) if len(s) else 0, int(s[-1]) + 1 if len(s) else 0,
                            int(d[0]) if len(d) else 0, int(d[-1]) + 1 if len(d) else 0,
                            int(edges[g]), int(edges[g + 1])))
    if not n_src and not n_dst:
        groups, n_groups = [], 0
    return Alignment(text, src_ids, dst_ids, groups, True, src_group, dst_group)


@dataclass
class ThlReport:
    """Residual cost of exchanging text between two tokenizers, over a batch of sequences."""

    n: int = 0
    """sequences examined (invalid ones included)"""
    invalid: int = 0
    """sequences rejected with ThlError (ids outside the vocabulary, invalid UTF-8)"""
    empty: int = 0
    """sequences with no text"""
    round_trip_failure_rate: float = 0.0
    """receiver decode(encode(text)) != text"""
    non_canonical_rate: float = 0.0
    """the source ids are not the source's own encoding of their text"""
    inexact_rate: float = 0.0
    """no byte-exact alignment: one coarse group"""
    coarseness: float = 0.0
    """fraction of receiver tokens in groups that are not 1:1"""
    mean_group_src: float = 0.0
    """source tokens per group"""
    mean_group_dst: float = 0.0
    """receiver tokens per group"""
    truncation_loss: float = 0.0
    """fraction of text bytes beyond the receiver's max_tokens"""
    length_gap: float = float("nan")
    """mean |mean-based log-ratio - sum-based log-ratio / n_dst| = mean |sum logp_src (1/n_dst - 1/n_src)|"""

    def as_row(self) -> dict:
        return asdict(self)


def residual(texts: list[str | None], src_tokenizer, dst_tokenizer, src_ids: list[list[int]] | None = None,
             src_logps: list | None = None, max_tokens: int | None = None) -> ThlReport:
    """Residual cost of THL over a batch; invalid sequences are counted, never raised.

    texts: completion texts (None entries are decoded from src_ids); src_ids: sampled source ids per
    sequence (None: canonical); src_logps: per-token source log-probs (enables the length gap);
    max_tokens: the receiver's completion budget (truncation loss).
    """
    n = len(texts)
    report = ThlReport(n=n)
    counts = dict(rt=0, nc=0, inexact=0, coarse=0, dst_tokens=0, g=0, gs=0, gd=0, lost=0, bytes=0)
    gaps = []
    for k, text in enumerate(texts):
        ids = None if src_ids is None else src_ids[k]
        try:
            alignment = align(text, src_tokenizer, dst_tokenizer, ids)
        except ThlError:
            report.invalid += 1
            continue
        text_bytes = alignment.text.encode()
        if not text_bytes:
            report.empty += 1
        canonical = src_tokenizer.encode(alignment.text, add_special_tokens=False)
        markers = set(src_tokenizer.all_special_ids) - {src_tokenizer.unk_token_id}  # EOS, pad: no text
        counts["nc"] += [i for i in alignment.src_ids if i not in markers] != canonical
        counts["rt"] += decode_text(dst_tokenizer, alignment.dst_ids) != alignment.text
        counts["inexact"] += not alignment.exact
        for g in alignment.groups:
            size_src, size_dst = g.src_end - g.src_start, g.dst_end - g.dst_start
            counts["coarse"] += size_dst if (size_src, size_dst) != (1, 1) else 0
            counts["gs"] += size_src
            counts["gd"] += size_dst
        counts["g"] += alignment.n_groups
        counts["dst_tokens"] += len(alignment.dst_ids)
        counts["bytes"] += len(text_bytes)
        if max_tokens is not None and len(alignment.dst_ids) > max_tokens:
            kept = decode_text(dst_tokenizer, alignment.dst_ids[:max_tokens]).encode()
            counts["lost"] += max(len(text_bytes) - len(kept), 0)
        if src_logps is not None and alignment.dst_ids and alignment.src_ids:
            total = float(np.sum(src_logps[k]))
            gaps.append(abs(total * (1 / len(alignment.dst_ids) - 1 / len(alignment.src_ids))))
    valid = n - report.invalid
    if valid:
        report.round_trip_failure_rate = counts["rt"] / valid
        report.non_canonical_rate = counts["nc"] / valid
        report.inexact_rate = counts["inexact"] / valid
    if counts["dst_tokens"]:
        report.coarseness = counts["coarse"] / counts["dst_tokens"]
    if counts["g"]:
        report.mean_group_src = counts["gs"] / counts["g"]
        report.mean_group_dst = counts["gd"] / counts["g"]
    if counts["bytes"]:
        report.truncation_loss = counts["lost"] / counts["bytes"]
    if gaps:
        report.length_gap = float(np.mean(gaps))
    return report
