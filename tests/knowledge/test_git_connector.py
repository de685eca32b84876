"""The git connector, end to end through the sync service: local repositories built with dulwich."""

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from dulwich import porcelain
from dulwich.repo import Repo

from knowledge.connectors.git import GitConnector, cache_folder, commit_dates, repository_name
from knowledge.models import Chunk, Document
from knowledge.services.sources import source_create
from knowledge.services.sync import source_sync
from tests.factories import folder_granted

JAN = datetime(2024, 1, 10, 9, 0, tzinfo=UTC)
FEB = datetime(2024, 2, 20, 14, 30, tzinfo=UTC)
MAR = datetime(2024, 3, 5, 8, 15, tzinfo=UTC)
APR = datetime(2024, 4, 1, 12, 0, tzinfo=UTC)

PASTA = "# Pasta\n\nBoil salted water, add the spaghetti and cook it for ten minutes.\n"
BIKE = "Fixing a tyre\n\nLever the tyre off the rim, patch the inner tube and pump it up.\n"
TAXES = "Expenses\n\nSubmit travel expense reports within thirty days, with every receipt.\n"


class Repository:
    """A working copy in ``path`` whose commits carry the dates the tests give them."""

    def __init__(self, path: Path):
        self.path = path
        porcelain.init(str(path)).close()

    def commit(self, when: datetime, files: dict[str, str | bytes | None], message: str = "change") -> bytes:
        """Write (str or bytes), or delete (None), each file, then commit them all at ``when``."""
        for name, content in files.items():
            file = self.path / name
            if content is None:
                porcelain.remove(str(self.path), paths=[str(file)])
                continue
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(content.encode() if isinstance(content, str) else content)
            porcelain.add(str(self.path), paths=[str(file)])
        timestamp = int(when.timestamp())
        return porcelain.commit(
            str(self.path),
            message=message.encode(),
            author=b"A <a@x>",
            committer=b"A <a@x>",
            commit_timestamp=timestamp,
            author_timestamp=timestamp,
            commit_timezone=0,
            author_timezone=0,
        )


@pytest.fixture(autouse=True)
def _caches_in_tmp_path(settings, tmp_path, tenant):
    """URL sources are fetched under ``KB_DATA_DIR``: a throwaway one here, beside the repositories,
    which the operator granted to ``tenant`` (a local repository is read only inside a grant)."""
    settings.KB_DATA_DIR = tmp_path / "kb-data"
    settings.KB_DATA_DIR.mkdir()
    (tmp_path / "repos").mkdir()
    folder_granted(tenant, tmp_path / "repos")
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # the failed-fetch test's loopback remote


@pytest.fixture
def repository(tmp_path):
    """``handbook``: pasta.md and bike.txt committed in January, taxes.md in February, pasta.md edited in March."""
    repo = Repository(tmp_path / "repos" / "handbook")
    repo.commit(JAN, {"pasta.md": PASTA, "guides/bike.txt": BIKE})
    repo.commit(FEB, {"finance/taxes.md": TAXES})
    repo.commit(MAR, {"pasta.md": PASTA + "\nServe it with the sauce.\n"})
    return repo


def git_source(tenant, location, **fields):
    return source_create(
        tenant=tenant, name=fields.pop("name", "handbook"), kind="git", location=str(location), **fields
    )


def live(source) -> dict[str, Document]:
    return {d.external_id: d for d in Document.objects.filter(source=source, deleted_at__isnull=True)}


def current_chunk_ids(document: Document) -> set[int]:
    return set(Chunk.objects.filter(version__document=document, is_current=True).values_list("pk", flat=True))


def published(document: Document) -> datetime:
    return document.versions.get(is_current=True).published_at


def test_the_first_sync_creates_a_document_per_file_dated_by_the_last_commit_that_touched_it(tenant, repository):
    (repository.path / "notes.bin").write_bytes(b"\x00\x01")  # unsupported, and never committed
    repository.commit(APR, {".github/pull_request.md": "Describe the change.", "logo.png": b"\x89PNG"})
    source = git_source(tenant, repository.path)

    run = source_sync(source=source)

    assert (run.status, run.new, run.failed, run.error) == ("done", 3, 0, "")
    documents = live(source)
    assert set(documents) == {"handbook/pasta", "handbook/guides/bike", "handbook/finance/taxes"}
    assert published(documents["handbook/pasta"]) == MAR
    assert published(documents["handbook/guides/bike"]) == JAN
    assert published(documents["handbook/finance/taxes"]) == FEB
    bike = documents["handbook/guides/bike"]
    assert (bike.sync_key, bike.uri) == ("guides/bike.txt", "guides/bike.txt")
    with Repo(str(repository.path)) as repo:
        tree = repo[repo[repo.head()].tree]
        assert bike.fingerprint == tree.lookup_path(repo.__getitem__, b"guides/bike.txt")[1].decode()


def test_a_commit_modifying_one_file_updates_it_and_leaves_the_others_untouched(tenant, repository):
    source = git_source(tenant, repository.path)
    source_sync(source=source)
    before = live(source)
    taxes_chunks = current_chunk_ids(before["handbook/finance/taxes"])
    repository.commit(APR, {"guides/bike.txt": BIKE + "\nCheck the brakes before riding.\n"})

    run = source_sync(source=source)

    assert (run.status, run.new, run.updated, run.unchanged, run.deleted) == ("done", 0, 1, 2, 0)
    after = live(source)
    assert published(after["handbook/guides/bike"]) == APR
    assert "brakes" in after["handbook/guides/bike"].versions.get(is_current=True).text
    assert current_chunk_ids(after["handbook/finance/taxes"]) == taxes_chunks


def test_a_sync_with_no_new_commit_reads_nothing(tenant, repository):
    source = git_source(tenant, repository.path)
    source_sync(source=source)

    run = source_sync(source=source)

    assert (run.status, run.new, run.updated, run.unchanged, run.deleted) == ("done", 0, 0, 3, 0)


def test_a_file_deleted_in_a_commit_is_marked_deleted(tenant, repository):
    source = git_source(tenant, repository.path)
    source_sync(source=source)
    repository.commit(APR, {"finance/taxes.md": None})

    run = source_sync(source=source)

    assert (run.status, run.deleted, run.unchanged) == ("done", 1, 2)
    taxes = Document.objects.get(source=source, external_id="handbook/finance/taxes")
    assert taxes.deleted_at is not None
    assert not taxes.versions.filter(is_current=True).exists()


def test_a_renamed_file_is_one_deleted_and_one_new_document(tenant, repository):
    source = git_source(tenant, repository.path)
    source_sync(source=source)
    repository.commit(APR, {"finance/taxes.md": None, "finance/expenses.md": TAXES})

    run = source_sync(source=source)

    assert (run.status, run.new, run.deleted, run.unchanged) == ("done", 1, 1, 2)
    documents = live(source)
    assert "handbook/finance/taxes" not in documents
    expenses = documents["handbook/finance/expenses"]
    assert published(expenses) == APR
    assert current_chunk_ids(expenses), "the renamed file's document is searchable"


def test_the_branch_setting_reads_that_branch(tenant, repository):
    with Repo(str(repository.path)) as repo:
        first = next(iter(repo.get_walker(reverse=True))).commit.id
    porcelain.branch_create(str(repository.path), "release", objectish=first)
    source = git_source(tenant, repository.path, branch="release")

    run = source_sync(source=source)

    assert (run.status, run.new) == ("done", 2)
    documents = live(source)
    assert set(documents) == {"handbook/pasta", "handbook/guides/bike"}
    assert "sauce" not in documents["handbook/pasta"].versions.get(is_current=True).text
    assert published(documents["handbook/pasta"]) == JAN


def test_a_missing_branch_fails_the_run_and_names_the_branches(tenant, repository):
    source = git_source(tenant, repository.path, branch="gh-pages")

    run = source_sync(source=source)

    assert run.status == "failed"
    assert "no branch 'gh-pages'" in run.error and "master" in run.error and "Nothing changed" in run.error
    assert not Document.objects.filter(source=source).exists()


def test_include_and_exclude_globs_select_the_files_read(tenant, repository):
    source = git_source(tenant, repository.path, include=["*.md"], exclude=["finance/*"])

    run = source_sync(source=source)

    assert (run.status, run.new) == ("done", 1)
    assert set(live(source)) == {"handbook/pasta"}


def test_uncommitted_edits_in_the_working_copy_are_ignored(tenant, repository):
    source = git_source(tenant, repository.path)
    source_sync(source=source)
    (repository.path / "pasta.md").write_text("# Pasta\n\nAn edit nobody committed.\n")
    (repository.path / "draft.md").write_text("# Draft\n\nStaged but not committed.\n")
    porcelain.add(str(repository.path), paths=[str(repository.path / "draft.md")])

    run = source_sync(source=source)

    assert (run.status, run.new, run.updated, run.unchanged) == ("done", 0, 0, 3)
    assert "sauce" in live(source)["handbook/pasta"].versions.get(is_current=True).text


def test_a_missing_repository_fails_the_run_with_the_reason_and_changes_nothing(tenant, repository, tmp_path):
    source = git_source(tenant, repository.path)
    source_sync(source=source)
    repository.path.rename(tmp_path / "repos" / "moved")

    run = source_sync(source=source)

    assert run.status == "failed"
    assert "no such repository" in run.error and "Nothing changed" in run.error
    assert len(live(source)) == 3


def test_a_folder_that_is_not_a_repository_fails_the_run(tenant, tmp_path):
    (tmp_path / "repos" / "plain").mkdir()
    source = git_source(tenant, tmp_path / "repos" / "plain")

    run = source_sync(source=source)

    assert run.status == "failed"
    assert "not a git repository" in run.error


def test_a_file_that_cannot_be_read_fails_alone(tenant, repository):
    repository.commit(APR, {"broken.txt": b"\xff\xfe\x00\x00\x81binary\x00"})
    source = git_source(tenant, repository.path)

    run = source_sync(source=source)

    assert (run.status, run.new, run.failed) == ("done", 3, 1)
    assert [e["document"] for e in run.errors] == ["broken.txt"]
    assert "handbook/broken" not in live(source)


def test_a_file_url_is_read_in_place_like_a_path_and_the_next_sync_finds_new_commits(tenant, repository):
    source = git_source(tenant, f"file://{repository.path}")

    first = source_sync(source=source)

    assert (first.status, first.new) == ("done", 3), first.error
    assert not cache_folder(source).exists()  # nothing copied into the data directory
    assert published(live(source)["handbook/pasta"]) == MAR

    repository.commit(APR, {"guides/brakes.md": "# Brakes\n\nAdjust the brake pads so they meet the rim evenly.\n"})
    second = source_sync(source=source)

    assert (second.status, second.new, second.unchanged) == ("done", 1, 3), second.error
    assert published(live(source)["handbook/guides/brakes"]) == APR


def test_a_file_url_with_no_repository_fails_the_run(tenant, tmp_path):
    source = git_source(tenant, f"file://{tmp_path / 'repos' / 'nowhere'}")

    run = source_sync(source=source)

    assert run.status == "failed"
    assert "no such repository" in run.error


def test_two_repositories_with_the_same_file_do_not_clash(tenant, tmp_path):
    for name in ("api", "wiki"):
        Repository(tmp_path / "repos" / name).commit(
            JAN, {"README.md": f"# {name}\n\nHow the {name} project is organised.\n"}
        )
    api = git_source(tenant, tmp_path / "repos" / "api", name="api")
    wiki = git_source(tenant, f"file://{tmp_path / 'repos' / 'wiki'}/.git", name="wiki")

    assert source_sync(source=api).new == 1
    assert source_sync(source=wiki).new == 1

    assert set(live(api)) == {"api/README"}
    assert set(live(wiki)) == {"wiki/README"}


def test_uri_prefix_and_text_format_shape_the_documents(tenant, tmp_path):
    repo = Repository(tmp_path / "repos" / "docs.git")
    repo.commit(JAN, {"ref/models.txt": "Models\n======\n\nA model is the single source of truth about your data.\n"})
    source = git_source(tenant, repo.path, uri_prefix="https://example.com/blob/main/", text_format="rst")

    source_sync(source=source)

    document = live(source)["docs/ref/models"]
    assert document.uri == "https://example.com/blob/main/ref/models.txt"
    assert document.title == "Models"


@pytest.mark.parametrize(
    ("location", "name"),
    [
        ("https://github.com/org/handbook.git", "handbook"),
        ("git@github.com:org/wiki.git", "wiki"),
        ("/srv/repos/api/", "api"),
        ("/srv/repos/api/.git", "api"),
    ],
)
def test_the_repository_name_is_the_last_part_of_the_location_without_git(location, name):
    assert repository_name(location) == name


def test_a_connector_reads_from_the_branch_tip_not_a_working_tree(tenant, repository, tmp_path):
    source = git_source(tenant, repository.path)
    (repository.path / "pasta.md").unlink()  # deleted on disk, still in the commit

    items = list(GitConnector(source).items({}))

    assert sorted(item.key for item in items) == ["finance/taxes.md", "guides/bike.txt", "pasta.md"]


def test_a_file_merged_from_a_branch_is_dated_by_its_commit_on_that_branch_not_the_merge(tmp_path):
    repository = Repository(tmp_path / "repos" / "handbook")
    repository.commit(JAN, {"pasta.md": PASTA, "bike.md": BIKE})
    porcelain.checkout(str(repository.path), "master", new_branch="side")
    repository.commit(FEB, {"bike.md": BIKE + "\nCheck the brakes.\n"})
    porcelain.checkout(str(repository.path), "master")
    repository.commit(MAR, {"pasta.md": PASTA + "\nServe it hot.\n"})
    merge, conflicts = porcelain.merge(
        str(repository.path), "side", no_ff=True, author=b"A <a@x>", committer=b"A <a@x>"
    )
    assert merge is not None and not conflicts
    with Repo(str(repository.path)) as repo:
        assert len(repo[merge].parents) == 2

    with Repo(str(repository.path)) as repo:
        tree = repo[repo[merge].tree]
        blobs = {path: tree.lookup_path(repo.__getitem__, path)[1] for path in (b"pasta.md", b"bike.md")}
        dates = commit_dates(repo, merge, blobs)

    assert dates == {b"pasta.md": MAR, b"bike.md": FEB}


def test_a_shallow_working_copy_dates_its_files_by_its_oldest_commit(tenant, repository, tmp_path):
    porcelain.clone(
        f"file://{repository.path}", str(tmp_path / "repos" / "shallow"), depth=1, errstream=io.BytesIO()
    ).close()
    source = git_source(tenant, tmp_path / "repos" / "shallow", name="shallow")

    items = {item.key: item for item in GitConnector(source).items({})}

    assert set(items) == {"finance/taxes.md", "guides/bike.txt", "pasta.md"}
    assert {item.documents[0].published_at for item in items.values()} == {MAR}


def test_a_working_copy_reads_a_branch_it_only_tracks_from_origin(tenant, repository, tmp_path):
    with Repo(str(repository.path)) as repo:
        first = next(iter(repo.get_walker(reverse=True))).commit.id
    porcelain.branch_create(str(repository.path), "release", objectish=first)
    porcelain.clone(str(repository.path), str(tmp_path / "repos" / "checkout"), errstream=io.BytesIO()).close()
    with Repo(str(tmp_path / "repos" / "checkout")) as checkout:
        assert b"refs/heads/release" not in checkout.refs
    source = git_source(tenant, tmp_path / "repos" / "checkout", name="checkout", branch="release")

    items = list(GitConnector(source).items({}))

    assert sorted(item.key for item in items) == ["guides/bike.txt", "pasta.md"]


def test_a_failed_fetch_never_shows_the_urls_credentials(tenant):
    source = git_source(tenant, "http://reader:s3cret-token@127.0.0.1:9/org/handbook.git")

    run = source_sync(source=source)

    assert run.status == "failed"
    assert "could not be fetched" in run.error and "127.0.0.1:9/org/handbook.git" in run.error
    assert "s3cret-token" not in run.error and "reader" not in run.error
