"""The exact cross-tokenizer probability of a text: log P(text | prompt) over every tokenization (docs/marginal.md).

A policy writes a text through every token sequence that decodes to it; THL and the ratios of HACPO, GRAFT and PRP
use one term of that sum, the canonical encoding's. `lattice` lists the tokens that can follow each byte offset of
a text (THL's byte rules, from mrl.core.token_bytes, the one module of mrl this one imports), `tokenizations` its
paths, and `marginal_logprobs` the sum under a causal LM, a search over tokenization prefixes on the KV cache: exact
up to `exact_limit` tokenizations, a beam with bounds beyond. The lattice, the search, the beam's bounds and the
decoders refused: docs/marginal.md. `mrl.core.thl.marginal_logprob` is this module's.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import torch

from mrl.core.token_bytes import ThlError, token_view, utf8_bytes


@dataclass(frozen=True)
class Lattice:
    """Every tokenization of one text by one tokenizer, as a graph over its UTF-8 byte offsets."""

    text: str
    n_bytes: int
    edges: tuple[tuple[tuple[int, int], ...], ...] = field(repr=False)
    """(n_bytes,): edges[i] = ((token id, end byte), ...) of the tokens that can follow a prefix of i bytes"""
    count: int
    """tokenizations of the whole text (0: the tokenizer cannot produce it)"""


@dataclass(frozen=True)
class Marginal:
    """log P(text | prompt) of one text, summed over its tokenizations."""

    logp: float
    """log of the summed probability of the tokenizations scored (the marginal when exact, else a lower bound)"""
    canonical_logp: float
    """log-probability of the tokenizer's own encoding of the text (-inf when that encoding is not a tokenization
    of the text: a normaliser or <unk> changed it)"""
    tokenizations: int
    """tokenizations of the text (Lattice.count)"""
    scored: int
    """tokenizations whose probability is in logp"""
    covered: float
    """lower bound on the share of the marginal that logp holds: F / (F + R), R the pruned prefixes' mass; 1 when
    exact"""
    exact: bool
    """every tokenization was scored"""

    @property
    def gap(self) -> float:
        """log marginal - log canonical (>= 0)"""
        return self.logp - self.canonical_logp

    @property
    def canonical_share(self) -> float:
        """P(canonical) / marginal: the share of the text's probability its canonical tokenization carries"""
        return math.exp(self.canonical_logp - self.logp) if self.logp > -math.inf else float("nan")


_PIECES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _pieces(tokenizer) -> tuple[dict[bytes, tuple[int, ...]], dict[bytes, tuple[int, ...]], int]:
    """(first, later, longest): piece bytes -> token ids, for a token that opens the text and for one after another
    token (a WordPiece word start then takes its space), and the longest piece in bytes. Special and zero-byte
    tokens are left out. Computed once per tokenizer."""
    if tokenizer not in _PIECES:
        _PIECES[tokenizer] = _piece_tables(tokenizer)
    return _PIECES[tokenizer]


def _piece_tables(tokenizer) -> tuple[dict[bytes, tuple[int, ...]], dict[bytes, tuple[int, ...]], int]:
    view = token_view(tokenizer)
    if view.rules.metaspace is not None or (view.rules.wordpiece_prefix is not None and view.rules.wordpiece_cleanup):
        # a decoder that strips the text's first space (Metaspace) or rewrites spaces around punctuation (WordPiece's
        # cleanup) does not write a text piece by piece: its lattice is not one over the text's bytes
        raise ThlError(f"{type(tokenizer).__name__} {getattr(tokenizer, 'name_or_path', '')!r}: the marginal "
                       f"handles byte-level, plain-piece and WordPiece (cleanup off) decoders, not Metaspace or "
                       f"WordPiece's cleanup")
    first: dict[bytes, list[int]] = {}
    later: dict[bytes, list[int]] = {}
    for token_id in range(view.vocab_size):
        if token_id in view.special:
            continue
        piece, spaced = view.piece(token_id)
        after = b" " + piece if spaced else piece
        opening = piece
        if view.rules.wordpiece_prefix is not None:  # the decoder keeps a text's first token's '##'
            opening = view.tokenizer.convert_ids_to_tokens(token_id).encode("utf-8")
        for table, key in ((first, opening), (later, after)):
            if key:
                table.setdefault(key, []).append(token_id)
    longest = max((len(p) for p in (*first, *later)), default=0)
    return ({p: tuple(ids) for p, ids in first.items()}, {p: tuple(ids) for p, ids in later.items()}, longest)


def lattice(tokenizer, text: str) -> Lattice:
    """The tokenization lattice of `text` under a fast tokenizer's pieces (see the module docstring)."""
    data = utf8_bytes(text)
    first, later, longest = _pieces(tokenizer)
    n = len(data)
    edges = []
    for start in range(n):
        table = first if start == 0 else later
        found = []
        for end in range(start + 1, min(n, start + longest) + 1):
            found.extend((token_id, end) for token_id in table.get(data[start:end], ()))
        edges.append(tuple(sorted(found)))
    count = [0] * n + [1]
    for start in range(n - 1, -1, -1):
        count[start] = sum(count[end] for _, end in edges[start])
    return Lattice(text, n, tuple(edges), count[0])


def tokenizations(graph: Lattice, limit: int | None = None) -> list[list[int]]:
    """The lattice's paths as token id lists, depth first in token id order; ThlError beyond `limit` of them."""
    if limit is not None and graph.count > limit:
        raise ThlError(f"{graph.text[:40]!r} has {graph.count} tokenizations, more than limit={limit}")
    paths: list[list[int]] = []

    def walk(start: int, prefix: list[int]) -> None:
        if start == graph.n_bytes:
            paths.append(prefix)
            return
        for token_id, end in graph.edges[start]:
            walk(end, prefix + [token_id])

    walk(0, [])
    return paths


def _logsumexp(values: list[float]) -> float:
    """log sum exp over Python floats (float64), in the order given; -inf for none."""
    if not values:
        return -math.inf
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


@dataclass
class _Node:
    """One tokenization prefix: its text, tokens, byte offset and log-probability."""

    text: int
    ids: tuple[int, ...]
    offset: int
    logp: float
    canonical: bool
    """a prefix of the canonical encoding"""
    done: bool = False
    """a complete tokenization, forwarded only for its EOS log-probability"""


def _step(model, input_ids: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor, cache):
    """One forward: each row's next-token log-softmax at its last position (float64 for the sums), and the cache."""
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, past_key_values=cache,
                use_cache=True, logits_to_keep=1)
    return torch.log_softmax(out.logits[:, -1].float(), dim=-1).double().cpu(), out.past_key_values


def _prompt_batch(tokenizer, prompts: list[str], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids and mask (B, P) of the distinct prompts, encoded without special tokens."""
    encoded = [e.ids for e in token_view(tokenizer).backend.encode_batch(prompts, add_special_tokens=False)]
    if not all(encoded):
        raise ValueError("a prompt encodes to no token; the first completion token needs a context")
    width = max(len(ids) for ids in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(row)) + row for row in encoded], device=device)
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in encoded], device=device)
    return ids, mask


@torch.no_grad()
def marginal_logprobs(model, tokenizer, prompts: list[str], texts: list[str], *, eos: bool = False,
                      exact_limit: int = 4096, beam: int = 64) -> list[Marginal]:
    """log P(text | prompt) summed over the text's tokenizations, for each (prompt, text), in one search.

    prompts: the prompt each completion follows, as the model reads it (encoded without special tokens; texts of
    one prompt share its forward); texts: the completion texts. eos: each tokenization followed by the tokenizer's
    EOS (a finished completion). exact_limit: a text with at most this many tokenizations is summed exactly; one
    with more by a beam that keeps `beam` prefixes of it per depth, the canonical one always, and bounds what it
    prunes by one step of lookahead: the completions of a pruned prefix h hold at most
    P(h) sum_{t in lattice edges after h} p(t | h). The forwards run in the model's dtype, the sums in float64;
    rows of a batch round in another order than alone, so a text's value moves by fp32 rounding with its company.
    """
    if len(prompts) != len(texts):
        raise ValueError(f"prompts and texts must have one entry each, got {len(prompts)} and {len(texts)}")
    if beam < 1 or exact_limit < 0:
        raise ValueError(f"beam={beam} must be >= 1 and exact_limit={exact_limit} >= 0")
    if eos and tokenizer.eos_token_id is None:
        raise ValueError("eos=True needs a tokenizer with an EOS token")
    if not texts:
        return []
    device = next(model.parameters()).device
    graphs = [lattice(tokenizer, text) for text in texts]
    canonical = [tuple(e.ids)
                 for e in token_view(tokenizer).backend.encode_batch(list(texts), add_special_tokens=False)]
    distinct = list(dict.fromkeys(prompts))
    prompt_ids, prompt_mask = _prompt_batch(tokenizer, distinct, device)
    lengths = prompt_mask.sum(-1).tolist()
    logp, cache = _step(model, prompt_ids, prompt_mask, (prompt_mask.cumsum(-1) - 1).clamp(min=0), None)
    source = [distinct.index(p) for p in prompts]   # each text's prompt row
    found: list[list[float]] = [[] for _ in texts]
    pruned: list[list[float]] = [[] for _ in texts]
    canonical_logp = [-math.inf] * len(texts)
    for k in range(len(texts)):   # the empty text: the empty tokenization, then EOS when asked
        if not graphs[k].n_bytes:
            canonical_logp[k] = float(logp[source[k], tokenizer.eos_token_id]) if eos else 0.0
            found[k].append(canonical_logp[k])
    frontier = [(_Node(k, (), 0, 0.0, True), source[k]) for k in range(len(texts)) if graphs[k].n_bytes]
    depth = 0
    while frontier:
        expand = []
        for node, row in frontier:
            if node.done:
                total = node.logp + float(logp[row, tokenizer.eos_token_id])
                found[node.text].append(total)
                if node.canonical:
                    canonical_logp[node.text] = total
            else:
                expand.append((node, row))
        kept = []
        for k in dict.fromkeys(node.text for node, _ in expand):
            mine = [(node, row) for node, row in expand if node.text == k]
            if graphs[k].count > exact_limit and len(mine) > beam:
                mine.sort(key=lambda item: (-item[0].logp, item[0].ids))
                for node, row in mine[beam:]:
                    if not node.canonical:
                        ahead = [float(logp[row, token_id]) for token_id, _ in graphs[k].edges[node.offset]]
                        pruned[k].append(node.logp + _logsumexp(ahead))
                mine = mine[:beam] + [item for item in mine[beam:] if item[0].canonical]
            kept.extend(mine)
        frontier = []
        for node, row in kept:
            graph = graphs[node.text]
            for token_id, end in graph.edges[node.offset]:
                ids = node.ids + (token_id,)
                child = _Node(node.text, ids, end, node.logp + float(logp[row, token_id]),
                              node.canonical and canonical[node.text][:len(ids)] == ids)
                if end == graph.n_bytes:
                    child.canonical = child.canonical and len(ids) == len(canonical[node.text])
                    if not eos:
                        found[node.text].append(child.logp)
                        if child.canonical:
                            canonical_logp[node.text] = child.logp
                        continue
                    child.done = True
                frontier.append((child, row))
        if not frontier:
            break
        depth += 1
        cache.reorder_cache(torch.tensor([row for _, row in frontier], device=device))
        prompt_of = [source[node.text] for node, _ in frontier]
        mask = torch.cat([prompt_mask[prompt_of],
                          torch.ones(len(frontier), depth, dtype=prompt_mask.dtype, device=device)], dim=1)
        last = torch.tensor([[node.ids[-1]] for node, _ in frontier], device=device)
        position = torch.tensor([[lengths[p] + depth - 1] for p in prompt_of], device=device)
        logp, cache = _step(model, last, mask, position, cache)
        frontier = [(node, row) for row, (node, _) in enumerate(frontier)]
    results = []
    for k, graph in enumerate(graphs):
        total, lost = _logsumexp(found[k]), _logsumexp(pruned[k])
        covered = 1.0 if lost == -math.inf else math.exp(total - _logsumexp([total, lost]))
        results.append(Marginal(total, canonical_logp[k], graph.count, len(found[k]), covered, not pruned[k]))
    return results


def marginal_logprob(model, tokenizer, prompt: str, text: str, *, eos: bool = False, exact_limit: int = 4096,
                     beam: int = 64) -> Marginal:
    """log P(text | prompt) summed over every tokenization of `text` the tokenizer's pieces can produce
    (marginal_logprobs for one text)."""
    return marginal_logprobs(model, tokenizer, [prompt], [text], eos=eos, exact_limit=exact_limit, beam=beam)[0]
