"""THL, the Tokenizer Heterogeneity Layer (docs/architecture.md, THL): text is the unit of exchange.

A peer's sampled ids are decoded and the text encoded with the receiver's tokenizer; `align` cuts both
tokenizations wherever both have a token boundary at the same byte (a token's bytes from mrl.core.token_bytes)
into groups, and `Alignment.project` moves per-token values onto the receiver's tokens (`sum` preserves every
group total). `residual` reports the exchange's cost per tokenizer pair, and `marginal_logprob` (mrl.core.marginal)
a text's probability over every tokenization. A text a side cannot reproduce byte for byte becomes one coarse group
flagged `exact=False` (or a ThlError with `strict=True`): nothing is aligned silently wrong.
"""
from __future__ import annotations

import numbers
import operator
from dataclasses import asdict, dataclass, field
from functools import cached_property
from itertools import accumulate

import numpy as np

from mrl.core.marginal import (Lattice, Marginal, lattice, marginal_logprob, marginal_logprobs,  # noqa: F401
                               tokenizations)
from mrl.core.stop_tokens import stop_ids
from mrl.core.token_bytes import ThlError, shown_value, token_view, utf8_bytes

# tokens the WordPiece decoder's cleanup glues to the previous word (tokenizers' `cleanup` rules)


def checked_ids(ids, vocab_size: int, role: str = "token") -> list[int]:
    """The ids as Python ints, each in [0, vocab_size); else ThlError naming the first bad position and value.

    Integers only (numpy integers included): floats, NaN, strings and bools are refused, never coerced."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise ThlError(f"{role} ids must be a sequence of integers, got {type(ids).__name__}")
    ids = list(ids)
    if all(type(i) is int for i in ids) and (not ids or (min(ids) >= 0 and max(ids) < vocab_size)):
        return ids
    out = []
    for position, value in enumerate(ids):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ThlError(
                f"{role} id at position {position} is {shown_value(value)} ({type(value).__name__}); ids must "
                f"be integers")
        if not 0 <= value < vocab_size:
            raise ThlError(f"{role} id at position {position} is {shown_value(value)}, outside the vocabulary "
                           f"[0, {vocab_size})")
        out.append(operator.index(value))
    return out


def token_pieces(tokenizer, ids: list[int]) -> list[bytes]:
    """The UTF-8 bytes each token contributes to the decoded text; special tokens contribute none.

    Raises ThlError for ids that are not integers or are outside the vocabulary (`checked_ids`).
    """
    view = token_view(tokenizer)
    ids = checked_ids(ids, view.vocab_size)
    cache = view.cache
    entries = [cache[i] if i in cache else view.piece(i) for i in ids]
    if not view.rules.wordpiece_prefix:
        return [piece for piece, _ in entries]
    pieces, first = [], True
    for piece, spaced in entries:
        if spaced and not first:
            piece = b" " + piece
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
    table: np.ndarray = field(repr=False)
    """(n_groups, 6) int64: src_start, src_end, dst_start, dst_end, byte_start, byte_end per group"""
    exact: bool
    """False when one side's pieces could not reproduce the text: one coarse group holds everything"""
    src_group: np.ndarray = field(repr=False)
    """(n_src,) group index of each source token"""
    dst_group: np.ndarray = field(repr=False)
    """(n_dst,) group index of each receiver token"""

    @property
    def n_groups(self) -> int:
        return len(self.table)

    @cached_property
    def groups(self) -> list[Group]:
        return [Group(*map(int, row)) for row in self.table]

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
        if how not in ("sum", "broadcast", "any", "all"):
            raise ValueError(f"how={how!r} is not allowed; expected one of ['sum', 'broadcast', 'any', 'all']")
        counts = self.table[:, 1] - self.table[:, 0]
        if how in ("any", "all"):
            hits = np.bincount(self.src_group, weights=values.astype(bool), minlength=self.n_groups)
            per_group = hits > 0 if how == "any" else hits == counts
            return per_group[self.dst_group]
        totals = np.bincount(self.src_group, weights=values.astype(np.float64), minlength=self.n_groups)
        if how == "broadcast":
            return (totals / np.maximum(counts, 1))[self.dst_group]
        out = np.zeros(n_dst)
        placed = self.table[:, 3] > self.table[:, 2]
        out[self.table[placed, 3] - 1] = totals[placed]
        return out


def _boundary_keys(pieces: list[bytes], radix: int) -> list[int]:
    """(n + 1) boundary keys: byte offset * radix + zero-byte tokens since the last byte-carrying one.

    Two tokenizations share a boundary when they share a key, so zero-byte tokens (a bare Metaspace
    '▁', a sampled EOS) align with their counterparts instead of merging with the next token.
    """
    lengths = [len(p) for p in pieces]
    if all(lengths):
        return [offset * radix for offset in accumulate(lengths, initial=0)]
    keys, offset, run = [0], 0, 0
    for length in lengths:
        offset, run = (offset + length, 0) if length else (offset, run + 1)
        keys.append(offset * radix + run)
    return keys


def _group_tokens(keys: np.ndarray, cuts: np.ndarray, n_groups: int) -> np.ndarray:
    """(n,) group index of each token: the cut segment [cuts[g], cuts[g+1]) holding its start key
    (trailing zero-byte tokens join the last group)."""
    return np.minimum(cuts.searchsorted(keys[:-1], "right") - 1, max(n_groups - 1, 0))


def decode_text(tokenizer, ids: list[int]) -> str:
    """The text of sampled ids, as THL sees it (special tokens skipped, no clean-up of spaces)."""
    return token_view(tokenizer).backend.decode(list(ids), skip_special_tokens=True)


def _encode(tokenizer, texts: list[str]) -> list[list[int]]:
    """Receiver (or canonical source) encodings without special tokens, in one batched call."""
    return [e.ids for e in token_view(tokenizer).backend.encode_batch(texts, add_special_tokens=False)]


def _align_encoded(text: str, src_ids: list[int], src_pieces: list[bytes], dst_ids: list[int], dst_tokenizer,
                   strict: bool) -> Alignment:
    """Group two encodings of one text by common byte boundaries (see `align`)."""
    text_bytes = utf8_bytes(text)
    src_fit = _fit_pieces(src_pieces, text_bytes)
    dst_fit = _fit_pieces(token_pieces(dst_tokenizer, dst_ids), text_bytes)
    n_src, n_dst = len(src_ids), len(dst_ids)
    if src_fit is None or dst_fit is None:
        if strict:
            side = "source" if src_fit is None else "receiver"
            raise ThlError(f"the {side} tokenization does not reproduce the text byte for byte: {text[:60]!r}")
        table = np.array([[0, n_src, 0, n_dst, 0, len(text_bytes)]] if (n_src or n_dst) else [], dtype=np.int64)
        return Alignment(text, src_ids, dst_ids, table.reshape(-1, 6), False, np.zeros(n_src, dtype=np.int64),
                         np.zeros(n_dst, dtype=np.int64))
    radix = n_src + n_dst + 1
    src_keys = np.array(_boundary_keys(src_fit, radix), dtype=np.int64)  # strictly increasing
    dst_keys = np.array(_boundary_keys(dst_fit, radix), dtype=np.int64)
    cuts = np.intersect1d(src_keys, dst_keys, assume_unique=True)  # always holds key 0
    n_groups = max(len(cuts) - 1, 1) if (n_src or n_dst) else 0
    src_group, dst_group = _group_tokens(src_keys, cuts, n_groups), _group_tokens(dst_keys, cuts, n_groups)
    edges = np.append(cuts[:n_groups], max(src_keys[-1], dst_keys[-1])) // radix  # byte offset of each cut
    index = np.arange(n_groups)
    table = np.stack([src_group.searchsorted(index, "left"), src_group.searchsorted(index, "right"),
                      dst_group.searchsorted(index, "left"), dst_group.searchsorted(index, "right"),
                      edges[:-1], edges[1:]], axis=1)
    return Alignment(text, src_ids, dst_ids, table, True, src_group, dst_group)


def align_batch(texts: list[str | None], src_tokenizer, dst_tokenizer, src_ids: list | None = None, *,
                strict: bool = False, carry_eos: bool = True) -> list[Alignment | ThlError]:
    """`align` over a batch with batched encoding; a sequence that cannot be aligned yields its
    ThlError in place of an Alignment (the batch goes on)."""
    n = len(texts)
    src_ids = [None] * n if src_ids is None else list(src_ids)
    prepared: list = [None] * n
    for k in range(n):
        try:
            prepared[k] = _prepare(texts[k], src_ids[k], src_tokenizer)
        except ThlError as err:
            prepared[k] = err
    valid = [k for k in range(n) if not isinstance(prepared[k], ThlError)]
    dst_eos = dst_tokenizer.eos_token_id
    dst_encodings = _encode(dst_tokenizer, [prepared[k][0] for k in valid])
    results: list = list(prepared)
    src_stops = set(stop_ids(src_tokenizer))
    for k, dst_ids in zip(valid, dst_encodings):
        text, ids, pieces = prepared[k]
        if carry_eos and ids and ids[-1] in src_stops and dst_eos is not None:
            dst_ids = dst_ids + [dst_eos]
        try:
            results[k] = _align_encoded(text, ids, pieces, dst_ids, dst_tokenizer, strict)
        except ThlError as err:
            if strict:
                raise
            results[k] = err
    return results


def _prepare(text: str | None, src_ids, src_tokenizer) -> tuple[str, list[int], list[bytes]]:
    """(text, source ids, their byte pieces) of one sequence: the text decoded from the ids, or the
    ids encoded from the text; raises ThlError for ids that are not integers of the source vocabulary, text
    that is not valid UTF-8, or ids whose bytes are not (a sequence cut inside a character)."""
    if text is not None:
        utf8_bytes(text)
    if src_ids is None:
        if text is None:
            raise ThlError("align needs a text or source ids")
        src_ids = _encode(src_tokenizer, [text])[0]
    src_ids = checked_ids(src_ids, token_view(src_tokenizer).vocab_size, "source")
    pieces = token_pieces(src_tokenizer, src_ids)
    try:
        b"".join(pieces).decode("utf-8")
    except UnicodeDecodeError as err:
        raise ThlError(f"the source ids' bytes are not valid UTF-8 at byte {err.start} (a sequence cut inside "
                       f"a character?); they hold no text to align") from None
    return (decode_text(src_tokenizer, src_ids) if text is None else text), src_ids, pieces


def align(text: str | None, src_tokenizer, dst_tokenizer, src_ids: list[int] | None = None, *,
          strict: bool = False, carry_eos: bool = True) -> Alignment:
    """Align a text's source tokenization with the receiver's by UTF-8 byte spans.

    text: the completion text (None: decoded from src_ids). src_ids: the sampled source ids (None:
    the source's canonical encoding of text). The receiver encodes the text without special tokens
    and, when the source ids end with the source's EOS and carry_eos, ends with its own EOS (the two
    EOS tokens then form their own 1:1 group).
    Raises ThlError for ids that are not integers of the source vocabulary (naming the position), a text or
    source ids whose bytes are not valid UTF-8 (ids cut inside a character, even with their decoded text given),
    and, with strict=True, when a side cannot reproduce the text byte for byte (else one coarse group).
    """
    result = align_batch([text], src_tokenizer, dst_tokenizer, [src_ids], strict=strict, carry_eos=carry_eos)[0]
    if isinstance(result, ThlError):
        raise result
    return result


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
    alignments = align_batch(texts, src_tokenizer, dst_tokenizer, src_ids)
    valid = [(k, a) for k, a in enumerate(alignments) if not isinstance(a, ThlError)]
    report.invalid = n - len(valid)
    canonical_ids = _encode(src_tokenizer, [a.text for _, a in valid])
    markers = set(src_tokenizer.all_special_ids) - {src_tokenizer.unk_token_id}  # EOS, pad: no text
    for (k, alignment), canonical in zip(valid, canonical_ids):
        text_bytes = alignment.text.encode()
        if not text_bytes:
            report.empty += 1
        counts["nc"] += [i for i in alignment.src_ids if i not in markers] != canonical
        counts["rt"] += decode_text(dst_tokenizer, alignment.dst_ids) != alignment.text
        counts["inexact"] += not alignment.exact
        size_src = alignment.table[:, 1] - alignment.table[:, 0]
        size_dst = alignment.table[:, 3] - alignment.table[:, 2]
        counts["coarse"] += int(size_dst[(size_src != 1) | (size_dst != 1)].sum())
        counts["gs"] += int(size_src.sum())
        counts["gd"] += int(size_dst.sum())
        counts["g"] += alignment.n_groups
        counts["dst_tokens"] += len(alignment.dst_ids)
        counts["bytes"] += len(text_bytes)
        if max_tokens is not None and len(alignment.dst_ids) > max_tokens:
            kept = decode_text(dst_tokenizer, alignment.dst_ids[:max_tokens]).encode()
            counts["lost"] += max(len(text_bytes) - len(kept), 0)
        if src_logps is not None and alignment.dst_ids and alignment.src_ids:
            total = float(np.sum(src_logps[k]))
            gaps.append(abs(total * (1 / len(alignment.dst_ids) - 1 / len(alignment.src_ids))))
    if valid:
        report.round_trip_failure_rate = counts["rt"] / len(valid)
        report.non_canonical_rate = counts["nc"] / len(valid)
        report.inexact_rate = counts["inexact"] / len(valid)
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
