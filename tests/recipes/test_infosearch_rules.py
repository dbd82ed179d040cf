"""The rule checks of the InfoSearch recipe, as pure functions: what they measure and where they draw the line."""

from __future__ import annotations

from ifsynth.flows.recipes.infosearch.document_rules import (
    cjk_share,
    keyword_in_document,
    keyword_not_in_siblings,
    keyword_specific,
    query_overlap,
    script,
    word_band,
    words,
)
from ifsynth.flows.recipes.infosearch.settings import DIMENSIONS

BANDS = DIMENSIONS["length"].word_bands


def test_an_80_word_sentence_is_rejected_with_its_word_count() -> None:
    check = word_band(" ".join(["word"] * 80) + ".", "sentence", BANDS["sentence"])
    assert (check.rule, check.value, check.passed) == ("word_count", 80, False)
    assert "80 words, outside the `sentence` band [3, 45]" in check.detail


def test_word_bands_keep_a_sentence_a_paragraph_and_an_article() -> None:
    assert word_band("Blue light scatters more than red light in air.", "sentence", BANDS["sentence"]).passed
    assert word_band(" ".join(["word"] * 100), "paragraph", BANDS["paragraph"]).passed
    assert not word_band(" ".join(["word"] * 100), "article", BANDS["article"]).passed
    assert word_band(" ".join(["word"] * 300), "article", BANDS["article"]).passed


def test_words_count_hyphenated_words_once_and_cjk_characters_each() -> None:
    assert words("state-of-the-art isn't new, 2024.") == 4
    assert words("流感通过飞沫传播") == 8


def test_a_chinese_passage_in_latin_script_is_rejected_with_its_cjk_share() -> None:
    check = script("Influenza spreads through droplets.", "cjk", min_cjk=0.5, max_cjk=0.05)
    assert (check.rule, check.value, check.passed) == ("script", 0.0, False)
    chinese = script("流感主要通过飞沫传播，也可以通过接触传播。", "cjk", min_cjk=0.5, max_cjk=0.05)
    assert chinese.passed and chinese.value == 1.0


def test_cjk_share_ignores_punctuation_digits_and_spaces() -> None:
    assert cjk_share("流感 2024 flu") == 2 / 5
    assert not script("Flu 流感传播", "latin", min_cjk=0.5, max_cjk=0.05).passed


def test_stop_words_and_generic_words_are_no_keyword_conditions() -> None:
    for vague in ("the", "What", "information", "the way"):
        check = keyword_specific(vague)
        assert (check.rule, check.value, check.passed) == ("keyword_specific", 1.0, False), vague
    assert keyword_specific("olive oil").passed and keyword_specific("olive oil").value == 0.0


def test_a_keyword_must_occur_in_its_document_as_whole_words() -> None:
    document = "Blend basil leaves with olive oil and freeze the paste."
    assert keyword_in_document("olive oil", document).value == 1
    assert keyword_in_document("Olive Oil", document).passed
    absent = keyword_in_document("oil paste", document)
    assert (absent.value, absent.passed) == (0, False)
    assert not keyword_in_document("bas", document).passed, "a fragment of a word is not the word"


def test_a_keyword_shared_by_a_sibling_document_is_rejected_with_the_count() -> None:
    siblings = ["Keep basil in water on the counter.", "Basil paste freezes well in olive oil."]
    check = keyword_not_in_siblings("olive oil", siblings)
    assert (check.rule, check.value, check.passed) == ("keyword_not_in_siblings", 1, False)
    assert keyword_not_in_siblings("ice cube tray", siblings).passed


def test_a_query_negative_must_use_the_query_words() -> None:
    near_miss = query_overlap(
        "how to store fresh basil", "Growing basil: fresh plants need sun; stores sell seeds.", 0.5
    )
    assert (near_miss.rule, near_miss.value, near_miss.passed) == ("query_overlap", 1.0, True)
    off_topic = query_overlap("how to store fresh basil", "Tomatoes ripen faster on a sunny windowsill.", 0.5)
    assert (off_topic.value, off_topic.passed) == (0.0, False)
