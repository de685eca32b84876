"""Named entities of chunks (spaCy's small English pipeline, offline) and their linking to sentences."""

import random
import threading

import pytest

from knowledge.enrichment import entities
from knowledge.enrichment.entities import (
    EntitiesUnavailable,
    entities_available,
    entities_extract,
    entities_in,
    entities_speed,
    entity_normalise,
)

KAISER = "Edgar Kaiser Sr. was the son of Henry J. Kaiser, founder of Kaiser Aluminum in Oakland."


def test_people_organisation_and_place():
    assert entities_available()
    [found] = entities_extract([KAISER])
    assert found == ["Edgar Kaiser Sr.", "Henry J. Kaiser", "Kaiser Aluminum", "Oakland"]


def test_hotpotqa_like_sentences():
    found = entities_extract(
        [
            "Scott Derrickson and Ed Wood were both American film directors.",
            "Shirley Temple played Corliss Archer in the film Kiss and Tell (1945) and later served as "
            "Chief of Protocol of the United States.",
            "The 2014 FIFA World Cup was won by Germany at the Maracanã Stadium in Rio de Janeiro.",
            "Allie Goertz wrote a song about Milhouse, a character from The Simpsons created by Matt Groening.",
        ]
    )
    assert found[0] == ["Scott Derrickson", "Ed Wood", "American"]
    assert {"Shirley Temple", "Corliss Archer", "Kiss and Tell", "United States"} <= set(found[1])
    assert {"Germany", "Maracanã Stadium", "Rio de Janeiro"} <= set(found[2])
    assert {"Allie Goertz", "Matt Groening"} <= set(found[3])
    # Dates and numbers are not entities.
    assert not any(any(c.isdigit() for c in name) and not any(c.isalpha() for c in name) for f in found for name in f)
    assert "1945" not in found[1] and "2014" not in found[2]


def test_one_list_per_text_in_order_blank_texts_empty():
    texts = ["", "   ", KAISER, "no names here at all, only words.", None]
    found = entities_extract(texts)
    assert len(found) == 5
    assert found[0] == found[1] == found[4] == []
    assert found[2][0] == "Edgar Kaiser Sr."
    assert found[3] == []
    assert entities_extract([]) == []


def test_distinct_first_appearance_and_capped():
    text = "Oakland is near Berkeley. OAKLAND grew fast, and Oakland's port too. " + " ".join(
        f"{name} visited Paris." for name in ["Alice Walker", "Barack Obama", "Angela Merkel"]
    )
    [found] = entities_extract([text])
    assert [name.casefold() for name in found].count("oakland") == 1
    assert found.index("Berkeley") > 0 and found[0].casefold() == "oakland"
    assert found.count("Paris") == 1
    many = " ".join(
        f"{city} is a city."
        for city in [
            "Paris",
            "London",
            "Berlin",
            "Madrid",
            "Rome",
            "Vienna",
            "Prague",
            "Warsaw",
            "Lisbon",
            "Dublin",
            "Oslo",
            "Helsinki",
            "Athens",
            "Budapest",
            "Brussels",
            "Amsterdam",
            "Copenhagen",
            "Stockholm",
            "Bern",
            "Sofia",
            "Zagreb",
            "Riga",
            "Tallinn",
        ]
    )
    [found] = entities_extract([many])
    assert len(found) == entities.ENTITIES
    assert found[:3] == ["Paris", "London", "Berlin"]


def test_normalise():
    assert entity_normalise("the  United\nStates") == "United States"
    assert entity_normalise("Kaiser Aluminum's") == "Kaiser Aluminum"
    assert entity_normalise("Kaiser Aluminum\u2019s") == "Kaiser Aluminum"
    assert entity_normalise("Charles Dickens'") == "Charles Dickens"
    assert entity_normalise('"Kiss and Tell"') == "Kiss and Tell"
    assert entity_normalise("Edgar Kaiser Sr.") == "Edgar Kaiser Sr."
    assert entity_normalise("Arthur's Magazine") == "Arthur's Magazine"
    assert entity_normalise(" - ") == ""
    assert entity_normalise("Battle of Adwa (Amharic") == "Battle of Adwa"
    assert entity_normalise("Ed Wood (film)") == "Ed Wood (film)"
    assert entity_normalise("Amharic) Adwa") == "Adwa"
    assert entity_normalise("(Tigray)") == "Tigray"


def test_kept_labels_and_repeats():
    spans = [
        ("Ed Wood Sr.", "PERSON"),
        ("1945", "DATE"),
        ("Ed Wood Sr", "PERSON"),
        ("the United States", "GPE"),
        ("United  States", "GPE"),
        ("twelve percent", "PERCENT"),
        ("first", "ORDINAL"),
        ("3,677", "CARDINAL"),
        ("Kiss and Tell", "WORK_OF_ART"),
        ("American", "NORP"),
        ("#12", "PRODUCT"),
    ]
    assert entities._distinct(spans) == ["Ed Wood Sr.", "United States", "Kiss and Tell", "American"]


def test_entities_in_links_a_sentence_to_its_chunk_entities():
    chunk_entities = ["Edgar Kaiser Sr.", "Henry J. Kaiser", "Kaiser Aluminum", "Oakland", "Kaiser"]
    sentence = "Henry  J. KAISER's company, Kaiser Aluminum, was based in Oakland; Kaiserslautern is elsewhere."
    assert entities_in(sentence, chunk_entities) == ["Henry J. Kaiser", "Kaiser Aluminum", "Oakland", "Kaiser"]
    assert entities_in("He moved to Kaiserslautern.", ["Kaiser"]) == []
    assert entities_in("Born in Oaklands.", ["Oakland"]) == []
    assert entities_in("The U.S. Navy", ["U.S.", "U.S. Navy", "", "  "]) == ["U.S.", "U.S. Navy"]
    assert entities_in("Oakland and oakland", ["Oakland", "oakland"]) == ["Oakland"]
    assert entities_in("", ["Oakland"]) == []
    assert entities_in("C++ (a+b)", ["(a+b)"]) == ["(a+b)"]


def test_threads_share_one_model():
    texts = [KAISER, "Scott Derrickson and Ed Wood were both American film directors."] * 5
    expected = entities_extract(texts)
    results, errors = [], []

    def work():
        try:
            results.append(entities_extract(texts))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results == [expected] * 4


def test_missing_package_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(entities, "MODEL_PACKAGE", "no_such_pipeline_package")
    monkeypatch.setattr(entities, "_nlp", None)
    assert not entities_available()
    with pytest.raises(EntitiesUnavailable, match="pip install") as caught:
        entities_extract([KAISER])
    assert isinstance(caught.value, RuntimeError)
    assert "no_such_pipeline_package" in str(caught.value)
    assert entities_extract(["", "  "]) == [[], []]  # no text, no model needed


def test_speed_on_300_token_chunks():
    """Prints chunks per second on texts of about 300 tokens (the ingestion's chunk size)."""
    sentences = [
        KAISER,
        "Scott Derrickson and Ed Wood were both American film directors.",
        "The Laleli Mosque is in Istanbul, Turkey, and the Esma Sultan Mansion in Ortaköy.",
        "The company reported that revenue grew by twelve percent over the previous quarter.",
        "Researchers at the University of Cambridge published a study on protein folding in Nature.",
        "The 2014 FIFA World Cup was won by Germany at the Maracanã Stadium in Rio de Janeiro.",
    ]
    rng = random.Random(0)
    texts = []
    for _ in range(60):
        words: list[str] = []
        while len(words) < 260:  # about 300 spaCy tokens with the punctuation
            words += rng.choice(sentences).split()
        texts.append(" ".join(words))
    rate = entities_speed(texts)
    print(f"\nentities_extract: {rate:.1f} chunks/s on ~300-token chunks")
    assert rate > 1
