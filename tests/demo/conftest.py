import pytest

from demo.services import DJANGO_VERSION

# One short reST page per folder the demo ingests (Django's docs are .txt files in reST).
PAGES = {
    "topics/db/models.txt": "======\nModels\n======\n\nA model is the single source of information about your data.",
    "howto/custom-model-fields.txt": (
        "===========================\nHow to create custom model fields\n===========================\n\n"
        "Write a custom model field by subclassing Field and implementing from_db_value and "
        "get_prep_value, then use the field on a model like any built-in field."
    ),
    "ref/models/fields.txt": "=====================\nModel field reference\n=====================\n\nCharField holds text.",
    "intro/overview.txt": "==============\nDjango at a glance\n==============\n\nDjango is a web framework.",
    "faq/general.txt": "===========\nFAQ: General\n===========\n\nDjango is pronounced JANG-oh.",
    "releases/5.2.txt": "========================\nDjango 5.2 release notes\n========================\n\n*April 2, 2025*\n\nComposite primary keys.",
}


@pytest.fixture
def data_dir(tmp_path, settings):
    """An empty ``KB_DATA_DIR``, beside the demo's downloads (the data directory is never granted)."""
    settings.KB_DATA_DIR = tmp_path / "data"
    settings.KB_DATA_DIR.mkdir()
    return settings.KB_DATA_DIR


@pytest.fixture
def downloads(tmp_path, data_dir, settings):
    """A ``KB_DEMO_DIR`` that already holds Django's extracted docs (nothing is fetched)."""
    downloads = tmp_path / "demo"
    docs = downloads / f"django-{DJANGO_VERSION}" / "docs"
    for name, text in PAGES.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text)
    settings.KB_DEMO_DIR = downloads
    return downloads
