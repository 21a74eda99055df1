"""The typed table cells: the numbers a report reads, the text a writer shows, and a table written with them."""
import math

import pandas as pd

from mrl.reports.cells import Count, Interval
from mrl.reports.paired import interval_count
from mrl.runtime.results import write_table


def test_a_count_keeps_its_numbers_and_shows_k_of_n():
    count = Count(2, 5)
    assert (count.k, count.n) == (2, 5) and str(count) == "2/5"


def test_an_interval_shows_as_the_tables_did_and_says_whether_it_has_ends():
    assert str(Interval(0.1234, 0.05, 0.196, True)) == "**+0.123 [+0.050, +0.196]**"
    assert str(Interval(-0.02, -0.05, 0.01, False)) == "-0.020 [-0.050, +0.010]"
    assert str(Interval(0.02, math.nan, math.nan)) == "+0.020" and not Interval(0.02, math.nan, math.nan).bounded
    assert str(Interval(math.nan, math.nan, math.nan)) == "" and Interval(0.0, -0.1, 0.1).bounded


def test_intervals_are_counted_from_the_cells_not_their_text():
    table = pd.DataFrame({"Δ": [Interval(0.1, 0.0, 0.2), Interval(0.1, math.nan, math.nan), ""],
                          "note": ["[+0.1, +0.2] typed by hand", "", ""]})
    assert interval_count(table) == 1


def test_a_table_of_cells_is_written_as_their_text(tmp_path):
    frame = pd.DataFrame({"probe": ["sgt", "grpo"], "collapsed runs": [Count(1, 3), Count(0, 3)],
                          "Δ": [Interval(0.1, 0.0, 0.2, True), Interval(math.nan, math.nan, math.nan)]})
    text = frame.assign(**{c: frame[c].map(str) for c in ("collapsed runs", "Δ")})
    typed, plain = write_table(frame, "typed", tmp_path), write_table(text, "plain", tmp_path)
    for ext in ("csv", "md"):
        assert typed[ext].read_text() == plain[ext].read_text()
    assert typed["tex"].read_text().replace("tab:typed", "tab:plain") == plain["tex"].read_text()
